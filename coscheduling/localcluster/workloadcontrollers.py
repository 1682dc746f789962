"""The real LeaderWorkerSet (sigs.k8s.io/lws) and JobSet (sigs.k8s.io/jobset) controllers,
built from Go modules and run against a LocalCluster, so that derived gangs are tested
against the pods they really make.

Both rely on their webhooks: the pod webhook gives every pod its labels (an LWS group's
index among them) and the workload's webhook fills its defaults. Out of cluster there is no
Service for them, so the webhooks are registered with a URL on loopback and a certificate
made here (their own certificate management is turned off), and removed again when the
controller stops: a pod webhook left behind would refuse every such workload's pods.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient

from .certs import create_certs
from .launcher import LocalCluster, free_ports, http_ok
from .operators import GoOperator, Log, OperatorBuild, OperatorProcess, apply_crd, ensure_operator

__all__ = ["JOBSET", "LWS", "WorkloadController", "WorkloadControllerProcess",
           "ensure_controller"]

WEBHOOKS = "/apis/admissionregistration.k8s.io/v1"


@dataclass(frozen=True)
class Webhook:
    """One webhook of the module's config/webhook/ manifests (as its kustomize patches
    leave them: pod webhooks see only the pods of the controller's workloads)."""

    name: str
    path: str
    group: str
    version: str
    resource: str
    operations: tuple[str, ...]
    mutating: bool


@dataclass(frozen=True)
class WorkloadController:
    """A kubebuilder controller of one workload kind, with its webhooks."""

    operator: GoOperator
    config_api: str  # its Configuration's apiVersion
    pod_label: str  # the label on every pod of its workloads
    webhooks: tuple[Webhook, ...]


def _hooks(group: str, version: str, resource: str, kind_path: str, *,
           defaulted_on: tuple[str, ...], pods_validated_on: tuple[str, ...],
           ) -> tuple[Webhook, ...]:
    """The four webhooks of a kubebuilder workload controller: the workload's and the
    pods' defaulting and validation (``kind_path``: the kind in its webhook paths)."""
    singular = resource.removesuffix("s")
    return (
        Webhook(f"m{singular}", f"/mutate-{kind_path}", group, version, resource,
                defaulted_on, True),
        Webhook("mpod", "/mutate--v1-pod", "", "v1", "pods", ("CREATE",), True),
        Webhook(f"v{singular}", f"/validate-{kind_path}", group, version, resource,
                ("CREATE", "UPDATE"), False),
        Webhook("vpod", "/validate--v1-pod", "", "v1", "pods", pods_validated_on, False),
    )


LWS = WorkloadController(
    GoOperator("lws", "sigs.k8s.io/lws", "./cmd", "0.9.0", "lws-manager", "config/crd/bases",
               "leaderworkerset.x-k8s.io_", "leaderworkerset", in_module=True),
    "config.lws.x-k8s.io/v1alpha1", "leaderworkerset.sigs.k8s.io/name",
    _hooks("leaderworkerset.x-k8s.io", "v1", "leaderworkersets",
           "leaderworkerset-x-k8s-io-v1-leaderworkerset", defaulted_on=("CREATE", "UPDATE"),
           pods_validated_on=("CREATE", "UPDATE")))
JOBSET = WorkloadController(
    GoOperator("jobset", "sigs.k8s.io/jobset", ".", "0.12.0", "jobset-manager",
               "config/components/crd/bases", "jobset.x-k8s.io_", "jobset", in_module=True),
    "config.jobset.x-k8s.io/v1alpha1", "jobset.sigs.k8s.io/jobset-name",
    _hooks("jobset.x-k8s.io", "v1alpha2", "jobsets", "jobset-x-k8s-io-v1alpha2-jobset",
           defaulted_on=("CREATE",), pods_validated_on=("CREATE",)))


def _default_log(message: str) -> None:
    print(f"[workload-controller] {message}", flush=True)


def ensure_controller(controller: WorkloadController, log: Log = _default_log) -> OperatorBuild:
    """The cached controller, built from the Go module proxy first if missing."""
    return ensure_operator(controller.operator, log)


def _webhook(hook: Webhook, url: str, ca_bundle: str, pod_label: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": f"{hook.name}.kb.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "failurePolicy": "Fail", "clientConfig": {"url": url + hook.path, "caBundle": ca_bundle},
        "rules": [{"apiGroups": [hook.group], "apiVersions": [hook.version],
                   "operations": list(hook.operations), "resources": [hook.resource]}]}
    if hook.resource == "pods":
        body["objectSelector"] = {"matchExpressions": [{"key": pod_label,
                                                        "operator": "Exists"}]}
    return body


class WorkloadControllerProcess(OperatorProcess):
    """One controller process against `cluster`, its CRD applied and webhooks registered on
    loopback; `stop` removes the webhooks."""

    def __init__(self, controller: WorkloadController, cluster: LocalCluster, workdir: Path,
                 *, build: OperatorBuild | None = None, log: Log = _default_log) -> None:
        super().__init__(workdir, log)
        self.controller = controller
        self.title = controller.operator.title
        self.cluster = cluster
        self.build = build
        self.webhook_port, self.probe_port = free_ports(2)
        self.configurations = {mutating: f"{self.title}-{self.webhook_port}-"
                               f"{'mutating' if mutating else 'validating'}"
                               for mutating in (True, False)}

    def _kube(self) -> KubeClient:
        return KubeClient(ClientSettings(kubeconfig=str(self.cluster.kubeconfig)))

    def _write_config(self) -> Path:
        """Its configuration file and serving certificate; the CA that signed it."""
        certs = create_certs(self.workdir / "pki")
        cert_dir = self.workdir / "serving-certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        (cert_dir / "tls.crt").write_bytes(certs.serving_cert.read_bytes())
        (cert_dir / "tls.key").write_bytes(certs.serving_key.read_bytes())
        config = {
            "apiVersion": self.controller.config_api, "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port,
                        "certDir": str(cert_dir)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.probe_port}"}}
        (self.workdir / "config.yaml").write_text(yaml.safe_dump(config))
        return certs.ca_cert

    def _register_webhooks(self, kube: KubeClient, ca_cert: Path) -> None:
        bundle = base64.b64encode(ca_cert.read_bytes()).decode()
        url = f"https://127.0.0.1:{self.webhook_port}"
        for mutating, name in self.configurations.items():
            kind = f"{'Mutating' if mutating else 'Validating'}WebhookConfiguration"
            hooks = [_webhook(h, url, bundle, self.controller.pod_label)
                     for h in self.controller.webhooks if h.mutating == mutating]
            kube.create(f"{WEBHOOKS}/{kind.lower()}s", {
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                "metadata": {"name": name}, "webhooks": hooks})

    def start(self) -> WorkloadControllerProcess:
        build = self.build or ensure_controller(self.controller, self.log)
        self.build = build
        self.workdir.mkdir(parents=True, exist_ok=True)
        ca_cert = self._write_config()
        kube = self._kube()
        try:
            manifest = build.crd_file(self.controller.operator.probe_scheme)
            apply_crd(kube, yaml.safe_load(manifest.read_text()))
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
        self.log(f"{self.title} controller ready (pid {self.pid}, log {self.log_path})")
        return self

    def stop(self) -> None:
        """The webhooks first (nothing may call a stopped controller), then the process."""
        kube = self._kube()
        try:
            for mutating, name in self.configurations.items():
                kind = "mutating" if mutating else "validating"
                try:
                    kube.delete(f"{WEBHOOKS}/{kind}webhookconfigurations/{name}")
                except ApiError as err:
                    if not err.not_found:
                        raise
        finally:
            kube.close()
        super().stop()
