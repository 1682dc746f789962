"""The real LeaderWorkerSet controller (sigs.k8s.io/lws), built from Go modules and run
against a LocalCluster, so that derived gangs are tested against the pods it really makes.

It relies on its webhooks: the pod webhook gives every pod of a group its labels (the group
index among them) and the LeaderWorkerSet webhook fills the defaults. Out of cluster there is
no Service for them, so the webhooks are registered with a URL on loopback and a
certificate made here (its own certificate management is turned off), and removed again when
the controller stops: a pod webhook left behind would refuse every LeaderWorkerSet's pods.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml

from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient

from .certs import create_certs
from .launcher import LocalCluster, free_ports, http_ok
from .operators import GoOperator, Log, OperatorBuild, OperatorProcess, apply_crd, ensure_operator

__all__ = ["LWS", "LWS_VERSION", "LeaderWorkerSetController", "ensure_lws"]

LWS_VERSION = "0.9.0"
LWS = GoOperator("lws", "sigs.k8s.io/lws", "./cmd", LWS_VERSION, "lws-manager",
                 "config/crd/bases", "leaderworkerset.x-k8s.io_", "leaderworkerset",
                 in_module=True)
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1"
# The webhooks of config/webhook/ in the module, as its kustomize patches leave them: the
# pod webhooks see only pods of a LeaderWorkerSet.
POD_SELECTOR = {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name",
                                      "operator": "Exists"}]}
MUTATING = (("mleaderworkerset", "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
             "leaderworkerset.x-k8s.io", "leaderworkersets", ["CREATE", "UPDATE"]),
            ("mpod", "/mutate--v1-pod", "", "pods", ["CREATE"]))
VALIDATING = (("vleaderworkerset", "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
               "leaderworkerset.x-k8s.io", "leaderworkersets", ["CREATE", "UPDATE"]),
              ("vpod", "/validate--v1-pod", "", "pods", ["CREATE", "UPDATE"]))


def _default_log(message: str) -> None:
    print(f"[lws] {message}", flush=True)


def ensure_lws(log: Log = _default_log) -> OperatorBuild:
    """The cached LeaderWorkerSet controller, built from the Go module proxy first if
    missing."""
    return ensure_operator(LWS, log)


def _webhook(name: str, path: str, group: str, resource: str, operations: list[str],
             url: str, ca_bundle: str) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": f"{name}.kb.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "failurePolicy": "Fail", "clientConfig": {"url": url + path, "caBundle": ca_bundle},
        "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": operations,
                   "resources": [resource]}]}
    if resource == "pods":
        hook["objectSelector"] = POD_SELECTOR
    return hook


class LeaderWorkerSetController(OperatorProcess):
    """One LWS controller process against `cluster`, its CRD applied and webhooks
    registered on loopback; `stop` removes the webhooks."""

    title = "lws"

    def __init__(self, cluster: LocalCluster, workdir: Path, *,
                 build: OperatorBuild | None = None, log: Log = _default_log) -> None:
        super().__init__(workdir, log)
        self.cluster = cluster
        self.build = build
        self.webhook_port, self.metrics_port, self.probe_port = free_ports(3)
        self.configurations = (f"lws-{self.webhook_port}-mutating",
                               f"lws-{self.webhook_port}-validating")

    def _kube(self) -> KubeClient:
        return KubeClient(ClientSettings(kubeconfig=str(self.cluster.kubeconfig)))

    def _write_config(self) -> Path:
        certs = create_certs(self.workdir / "pki")
        cert_dir = self.workdir / "serving-certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        (cert_dir / "tls.crt").write_bytes(certs.serving_cert.read_bytes())
        (cert_dir / "tls.key").write_bytes(certs.serving_key.read_bytes())
        config = {
            "apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port,
                        "certDir": str(cert_dir)},
            "metrics": {"bindAddress": f"127.0.0.1:{self.metrics_port}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.probe_port}"}}
        path = self.workdir / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        return certs.ca_cert

    def _register_webhooks(self, kube: KubeClient, ca_cert: Path) -> None:
        bundle = base64.b64encode(ca_cert.read_bytes()).decode()
        url = f"https://127.0.0.1:{self.webhook_port}"
        for (name, kind, hooks) in (
                (self.configurations[0], "MutatingWebhookConfiguration", MUTATING),
                (self.configurations[1], "ValidatingWebhookConfiguration", VALIDATING)):
            kube.create(f"{WEBHOOKS}/{kind.lower()}s", {
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                "metadata": {"name": name},
                "webhooks": [_webhook(*hook, url=url, ca_bundle=bundle) for hook in hooks]})

    def start(self) -> LeaderWorkerSetController:
        build = self.build or ensure_lws(self.log)
        self.build = build
        self.workdir.mkdir(parents=True, exist_ok=True)
        ca_cert = self._write_config()
        kube = self._kube()
        try:
            apply_crd(kube, yaml.safe_load(build.crd_file("leaderworkerset").read_text()))
            self._spawn([str(build.binary), f"--config={self.workdir / 'config.yaml'}"],
                        {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig)})
            self._wait(lambda: http_ok(f"http://127.0.0.1:{self.probe_port}/readyz", None),
                       "its readyz check to pass")
            self._register_webhooks(kube, ca_cert)
        except BaseException:
            self.stop()
            raise
        finally:
            kube.close()
        self.log(f"lws controller ready (pid {self.pid}, log {self.log_path})")
        return self

    def stop(self) -> None:
        """The webhooks first (nothing may call a stopped controller), then the process."""
        kube = self._kube()
        try:
            for name, kind in zip(self.configurations, ("mutating", "validating"),
                                  strict=True):
                try:
                    kube.delete(f"{WEBHOOKS}/{kind}webhookconfigurations/{name}")
                except ApiError as err:
                    if not err.not_found:
                        raise
        finally:
            kube.close()
        super().stop()
