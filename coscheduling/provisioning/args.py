"""The Coscheduling plugin's ``scaleUp`` arguments."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coscheduling.config.errors import (
    ConfigError,
    as_bool,
    as_float,
    as_mapping,
    as_str,
    reject_unknown,
)
from coscheduling.provisioning.requests import ATOMIC_CLASS

_KNOWN = {"enabled", "provisioningClassName", "retrySeconds", "maxRetrySeconds",
          "guardNodes", "preemptionDelaySeconds", "provisionedHoldSeconds"}


@dataclass(frozen=True)
class ScaleUpArgs:
    # Off by default: it writes ProvisioningRequests, which only an autoscaler serves.
    enabled: bool = False
    provisioning_class: str = ATOMIC_CLASS
    # A request that failed or expired is asked again after this, doubling up to the max.
    retry_seconds: float = 10.0
    max_retry_seconds: float = 300.0
    # Mark nodes holding a gang's claims, waiting members or reservation so that the
    # autoscaler does not remove them (independent of `enabled`).
    guard_nodes: bool = False
    # How long a gang that could preempt waits for its scale-up first (0: it preempts at
    # once, as without scale-ups); a PodGroup may say otherwise
    # (batch.scheduler.tencent.com/scale-up-wait-seconds).
    preemption_delay_seconds: float = 0.0
    # How long the room a Provisioned request added stays held for its gang at most (it
    # ends earlier when the gang is placed or deleted): as long as the autoscaler's own
    # booking of it, so that neither gives the room away before the other.
    provisioned_hold_seconds: float = 600.0

    def to_dict(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "provisioningClassName": self.provisioning_class,
                "retrySeconds": self.retry_seconds, "maxRetrySeconds": self.max_retry_seconds,
                "guardNodes": self.guard_nodes,
                "preemptionDelaySeconds": self.preemption_delay_seconds,
                "provisionedHoldSeconds": self.provisioned_hold_seconds}


def validate_scale_up(value: object, path: str) -> dict[str, Any]:
    """Checked ``scaleUp`` arguments, with defaults filled in; errors name the field."""
    raw: Mapping[str, Any] = as_mapping(value, path)
    reject_unknown(raw, _KNOWN, path)
    defaults = ScaleUpArgs()
    retry = as_float(raw.get("retrySeconds", defaults.retry_seconds), f"{path}.retrySeconds",
                     exclusive_minimum=0)
    most = as_float(raw.get("maxRetrySeconds", defaults.max_retry_seconds),
                    f"{path}.maxRetrySeconds", exclusive_minimum=0)
    if most < retry:
        raise ConfigError(f"{path}.maxRetrySeconds",
                          f"must be >= retrySeconds ({retry:g}), got {most:g}")
    class_name = as_str(raw.get("provisioningClassName", defaults.provisioning_class),
                        f"{path}.provisioningClassName")
    if not class_name:
        raise ConfigError(f"{path}.provisioningClassName", "must not be empty")
    return ScaleUpArgs(
        as_bool(raw.get("enabled", defaults.enabled), f"{path}.enabled"), class_name,
        retry, most, as_bool(raw.get("guardNodes", defaults.guard_nodes), f"{path}.guardNodes"),
        as_float(raw.get("preemptionDelaySeconds", defaults.preemption_delay_seconds),
                 f"{path}.preemptionDelaySeconds", minimum=0),
        as_float(raw.get("provisionedHoldSeconds", defaults.provisioned_hold_seconds),
                 f"{path}.provisionedHoldSeconds", exclusive_minimum=0),
    ).to_dict()


def scale_up_wait(group: float | None, queue: float | None, default: float) -> float:
    """How long a gang that could preempt waits for its scale-up first: its PodGroup's
    annotation, else its Queue's spec.scaleUpWaitSeconds, else preemptionDelaySeconds."""
    if group is not None:
        return group
    return queue if queue is not None else default


def parse_scale_up(raw: Mapping[str, Any]) -> ScaleUpArgs:
    checked = validate_scale_up(raw, "args.scaleUp")
    return ScaleUpArgs(bool(checked["enabled"]), str(checked["provisioningClassName"]),
                       float(checked["retrySeconds"]), float(checked["maxRetrySeconds"]),
                       bool(checked["guardNodes"]), float(checked["preemptionDelaySeconds"]),
                       float(checked["provisionedHoldSeconds"]))
