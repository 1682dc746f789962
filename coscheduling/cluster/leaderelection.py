"""Leader election on a coordination.k8s.io Lease, with kube-scheduler's timing rules.

A candidate takes the Lease when it is free or its holder stopped renewing for
``lease_duration``, measured on this replica's own clock from when it last saw the Lease
change (as client-go does: another machine's clock, in renewTime, is never compared with
ours, so a clock skew cannot make two leaders); the leader renews every ``retry_period``
and gives up leadership the moment it has gone ``renew_deadline`` without a successful
renewal, before any other candidate may take over (renew_deadline < lease_duration), so two
leaders never overlap.
Updates use the Lease's resourceVersion, so two candidates cannot both win a race.

The election thread must never end quietly: a replica whose thread died would keep its
leader label (and so the gRPC Service's traffic) and never run for leader again. Any
exception ends leadership and the process (``_fail``): ``on_stopped_leading`` stops the
scheduler and tells the command's main loop, which exits 1 after draining gRPC (the pod
restarts, the Service stops routing to it), and the Lease is handed back. Should nothing end
the process within ``EXIT_AFTER_FAILURE`` seconds (a main loop that does not watch, or a
shutdown that hangs), the thread ends it itself with ``os._exit`` once the logs are flushed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from coscheduling.api.times import format_rfc3339_micro
from coscheduling.cluster.client import ApiError, KubeClient, q
from coscheduling.config.types import LeaderElection

log = logging.getLogger(__name__)

# How long a failed election thread waits for the process to shut down on its own (the main
# loop notices within a second; gRPC gets up to its --grace, 10 s by default, to drain)
# before it ends the process itself.
EXIT_AFTER_FAILURE = 60.0
FAILURE_EXIT_CODE = 1


def default_identity() -> str:
    """The pod's name in a cluster (POD_NAME, from the downward API): the API server knows
    a pod-bound token's pod, so the fencing policy can compare it with the Lease holder.
    Elsewhere the host name and a random suffix, as kube-scheduler names itself."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    def __init__(self, client: KubeClient, settings: LeaderElection, *,
                 on_started_leading: Callable[[], None],
                 on_stopped_leading: Callable[[], None],
                 identity: str = "") -> None:
        self.client = client
        self.settings = settings
        self.identity = identity or default_identity()
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.leading = threading.Event()
        self.transitions = 0
        self._last_renew = 0.0
        # The Lease as last seen (holder, renewTime, resourceVersion), and when (monotonic):
        # a holder whose record has not changed for its lease duration has stopped renewing.
        self._observed: tuple[str, str, str] = ("", "", "")
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._path = (f"/apis/coordination.k8s.io/v1/namespaces/"
                      f"{q(settings.resource_namespace)}/leases")
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop; a leader hands the Lease back so a follower takes over without waiting."""
        self._stop.set()
        if self._thread.ident is not None:  # started (serve never starts it)
            self._thread.join(timeout=self.settings.retry_period + 5)
        if release and self.leading.is_set():
            self._release()

    def _run(self) -> None:
        try:
            self._campaign()
        except BaseException as err:  # whatever it is, this replica can no longer elect
            self._fail(err)

    def _fail(self, err: BaseException) -> None:
        """End leadership and the process after ``err`` escaped the election loop."""
        was_leading = self.leading.is_set()
        self.leading.clear()  # holds_lease() is False from here: nothing more is bound
        log.critical("leader election failed (%s: %s); ending leadership and the process",
                     type(err).__name__, err, exc_info=err)
        try:
            self.on_stopped_leading()  # stops the scheduler; the main loop exits 1
        except BaseException:
            log.critical("stopping after the election failed did not work either",
                         exc_info=True)
            exit_now(FAILURE_EXIT_CODE)
        if was_leading:
            try:  # a follower takes over at once instead of after leaseDuration
                self._release()
            except Exception as release_err:
                log.warning("could not hand the lease back: %s", release_err)
        if not self._stop.wait(EXIT_AFTER_FAILURE):  # stop() is part of every shutdown
            log.critical("the process did not stop within %gs of the election failing; "
                         "exiting", EXIT_AFTER_FAILURE)
            exit_now(FAILURE_EXIT_CODE)

    def _campaign(self) -> None:
        last_renew = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if self.leading.is_set() and now - last_renew >= self.settings.renew_deadline:
                # Checked before trying to renew: a leader paused (or starved) past its renew
                # deadline has lost its term even if the Lease is free to take again, since
                # another replica may have led meanwhile. It must not carry on with work it
                # decided in that term (as client-go's renew deadline ends the term too).
                log.error("lost leadership: no renewal for %.1fs", now - last_renew)
                self.leading.clear()
                self.on_stopped_leading()
                return
            try:
                acquired = self._try_acquire_or_renew()
            except ApiError as err:
                log.warning("leader election: %s", err)
                acquired = False
            if acquired:
                last_renew = self._last_renew = now
                if not self.leading.is_set():
                    log.info("became leader (%s)", self.identity)
                    self.leading.set()
                    self.on_started_leading()
            self._stop.wait(self.settings.retry_period)

    def holder(self) -> str:
        """The identity last seen holding the Lease ("" when none)."""
        return self._observed[0]

    def _observe(self, spec: dict[str, Any], version: str) -> float:
        """Record the Lease as seen now; how long (seconds, by this replica's clock) it has
        gone unchanged."""
        now = time.monotonic()
        seen = (str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or ""),
                version)
        if seen != self._observed:
            self._observed, self._observed_at = seen, now
        return now - self._observed_at

    def holds_lease(self) -> bool:
        """Leading, and renewed within renewDeadline: checked before every bind, so a
        leader whose election thread is starved cannot go on binding after a follower may
        have taken over."""
        return (self.leading.is_set()
                and time.monotonic() - self._last_renew < self.settings.renew_deadline)

    def _lease_body(self, spec: dict[str, Any], rv: str = "") -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.settings.resource_name,
                                "namespace": self.settings.resource_namespace}
        if rv:
            meta["resourceVersion"] = rv
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": spec}

    def _try_acquire_or_renew(self) -> bool:
        now = time.time()
        stamp = format_rfc3339_micro(now)
        name = q(self.settings.resource_name)
        try:
            lease = self.client.get(f"{self._path}/{name}")
        except ApiError as err:
            if not err.not_found:
                raise
            fresh = {"holderIdentity": self.identity, "acquireTime": stamp, "renewTime": stamp,
                     "leaseDurationSeconds": int(self.settings.lease_duration),
                     "leaseTransitions": 0}
            try:
                self.client.create(self._path, self._lease_body(fresh))
            except ApiError as create_err:
                if create_err.conflict:
                    return False
                raise
            self._observe(fresh, "")
            return True
        spec: dict[str, Any] = dict(lease.get("spec") or {})
        holder = spec.get("holderIdentity") or ""
        unchanged = self._observe(spec, str(lease["metadata"].get("resourceVersion") or ""))
        duration = float(spec.get("leaseDurationSeconds") or self.settings.lease_duration)
        if holder and holder != self.identity and unchanged < duration:
            return False  # someone else holds a live lease
        if holder != self.identity:
            spec["acquireTime"] = stamp
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            self.transitions += 1
        spec.update(holderIdentity=self.identity, renewTime=stamp,
                    leaseDurationSeconds=int(self.settings.lease_duration))
        try:
            written = self.client.request(
                "PUT", f"{self._path}/{name}",
                body=self._lease_body(spec, lease["metadata"]["resourceVersion"]))
        except ApiError as err:
            if err.conflict:
                return False  # another candidate updated it first
            raise
        self._observe(spec, str((written.get("metadata") or {}).get("resourceVersion") or ""))
        return True

    def _release(self) -> None:
        name = q(self.settings.resource_name)
        try:
            lease = self.client.get(f"{self._path}/{name}")
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return
            spec["holderIdentity"] = ""
            spec["leaseDurationSeconds"] = 1
            self.client.request("PUT", f"{self._path}/{name}",
                                body=self._lease_body(spec, lease["metadata"]["resourceVersion"]))
        except ApiError as err:
            log.warning("could not release the lease: %s", err)
        self.leading.clear()


def exit_now(code: int) -> None:
    """End the process from any thread, after flushing what it has logged: sys.exit would
    only end the calling thread."""
    for flushing in [*logging.getLogger().handlers, sys.stdout, sys.stderr]:
        with contextlib.suppress(Exception):  # a broken stream must not keep the process up
            flushing.flush()
    os._exit(code)
