"""The kubeconfig's credential refresh runs at most once a second, not before every request."""

from __future__ import annotations

from pathlib import Path

from coscheduling.cluster.client import ClientSettings, load_configuration

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_refresh_hook_is_throttled_and_still_applies_the_token(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    configuration = load_configuration(ClientSettings(kubeconfig=str(path)))
    hook = configuration.refresh_api_key_hook
    assert hook is not None
    calls = 0
    original_setattr = type(configuration).__setattr__

    def counting(self: object, name: str, value: object) -> None:
        nonlocal calls
        if name == "host":
            calls += 1
        original_setattr(self, name, value)

    type(configuration).__setattr__ = counting  # type: ignore[method-assign, assignment]
    try:
        for _ in range(200):
            assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer abc"
    finally:
        type(configuration).__setattr__ = original_setattr  # type: ignore[method-assign]
    assert calls == 1
