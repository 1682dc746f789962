"""TLS and service-account keys for the local control plane, made with the openssl CLI.

The CLI keeps the project free of a crypto dependency; the cluster is throwaway, so the
certificates are short-lived and generated fresh for each work directory.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "SERVING_SANS",
    "ClusterCerts",
    "create_certs",
    "create_client_cert",
    "create_serving_cert",
]

# Names a client may use to reach the apiserver: loopback, and the in-cluster service names.
SERVING_SANS = (
    "IP:127.0.0.1",
    "IP:10.0.0.1",
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class ClusterCerts:
    """Paths of the generated PEM files."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path
    service_account_pub: Path


def _config(common_name: str, extensions: list[str], organization: str = "") -> str:
    """A self-contained openssl config, so the system openssl.cnf cannot interfere."""
    lines = ["[req]", "distinguished_name = dn", "prompt = no", "[dn]", f"CN = {common_name}"]
    lines += [f"O = {organization}"] if organization else []
    return "\n".join([*lines, "[ext]", *extensions, ""])


def _openssl(*args: str, config: str | None = None) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError(
            "the openssl CLI is not on PATH; it is needed to make the cluster's certificates"
        )
    command = [openssl, *args]
    if config is not None:
        command += ["-config", "/dev/stdin"]
    result = subprocess.run(command, input=config, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr.strip()}")


def _self_or_ca_signed(
    cert: Path,
    key: Path,
    common_name: str,
    extensions: list[str],
    ca: tuple[Path, Path] | None,
    organization: str = "",
) -> None:
    """Create an EC key and a certificate: self-signed, or signed by `ca` (cert, key)."""
    args = ["req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    args += ["-nodes", "-keyout", str(key), "-out", str(cert), "-days", "825", "-extensions", "ext"]
    if ca is not None:
        args += ["-CA", str(ca[0]), "-CAkey", str(ca[1])]
    _openssl(*args, config=_config(common_name, extensions, organization))
    key.chmod(0o600)


def create_certs(directory: Path, extra_sans: Sequence[str] = ()) -> ClusterCerts:
    """Create a CA, an apiserver serving cert signed by it (for SERVING_SANS and
    `extra_sans`, e.g. the address pods reach it on), and a service-account RSA key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    certs = ClusterCerts(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        service_account_key=directory / "sa.key",
        service_account_pub=directory / "sa.pub",
    )
    ca_ext = ["basicConstraints = critical,CA:TRUE", "keyUsage = critical,keyCertSign,cRLSign"]
    _self_or_ca_signed(certs.ca_cert, certs.ca_key, "coscheduling-local-ca", ca_ext, None)
    create_serving_cert(certs, certs.serving_cert, certs.serving_key, "kube-apiserver",
                        list(dict.fromkeys([*SERVING_SANS, *extra_sans])))
    sa_key = str(certs.service_account_key)
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", sa_key)
    certs.service_account_key.chmod(0o600)
    _openssl("pkey", "-in", sa_key, "-pubout", "-out", str(certs.service_account_pub))
    return certs


def create_client_cert(
    certs: ClusterCerts, cert: Path, key: Path, user: str, group: str
) -> None:
    """A client certificate signed by the cluster CA: the API server reads the user from
    its CN and the group from its O (a kubelet is `system:node:<name>` in `system:nodes`,
    which the Node authorizer requires)."""
    extensions = [
        "basicConstraints = critical,CA:FALSE",
        "keyUsage = critical,digitalSignature,keyEncipherment",
        "extendedKeyUsage = clientAuth",
    ]
    _self_or_ca_signed(cert, key, user, extensions, (certs.ca_cert, certs.ca_key), group)


def create_serving_cert(
    certs: ClusterCerts, cert: Path, key: Path, common_name: str, sans: list[str]
) -> None:
    """A serving certificate signed by the cluster CA for `sans` (e.g. "IP:192.0.2.2"): a
    kubelet's, which the API server verifies with the CA when it proxies logs and exec."""
    extensions = [
        "basicConstraints = critical,CA:FALSE",
        "keyUsage = critical,digitalSignature,keyEncipherment",
        "extendedKeyUsage = serverAuth",
        f"subjectAltName = {','.join(sans)}",
    ]
    _self_or_ca_signed(cert, key, common_name, extensions, (certs.ca_cert, certs.ca_key))
