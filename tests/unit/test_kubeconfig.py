"""The scheduler's own kubeconfig and service-account loader: what each kubeconfig field
does, the errors that name the field, and real TLS handshakes with the settings it builds."""

from __future__ import annotations

import base64
import ssl
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from coscheduling.cluster import kubeconfig
from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient
from coscheduling.cluster.kubeconfig import CredentialsError, in_cluster_endpoint, load_endpoint
from coscheduling.localcluster.certs import _self_or_ca_signed

Pair = tuple[Path, Path]
CA_EXT = ["basicConstraints = critical,CA:TRUE", "keyUsage = critical,keyCertSign,cRLSign"]
SERVER = "https://127.0.0.1:6443"


def _config(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None,
            **top: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": SERVER,
                                               "insecure-skip-tls-verify": True,
                                               **(cluster or {})}}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        **top,
    }


def _write(directory: Path, doc: Any, name: str = "kubeconfig") -> str:
    path = directory / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return str(path)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(("user", "headers"), [
    ({}, {}),
    ({"token": "abc"}, {"Authorization": "Bearer abc"}),
    ({"username": "ann", "password": "pw"}, {"Authorization": "Basic " + _b64(b"ann:pw")}),
    # tokenFile is relative to the kubeconfig, and wins over token, as in client-go.
    ({"tokenFile": "token.txt", "token": "old"}, {"Authorization": "Bearer from-file"}),
])
def test_user_credentials(tmp_path: Path, user: dict[str, Any], headers: dict[str, str]) -> None:
    (tmp_path / "token.txt").write_text("from-file\n")
    endpoint = load_endpoint(_write(tmp_path, _config(user=user)))
    assert dict(endpoint.credentials()) == headers
    assert endpoint.host == SERVER


@pytest.mark.parametrize(("cluster", "verify", "server_hostname", "proxy"), [
    ({}, False, None, None),
    ({"tls-server-name": "kubernetes"}, False, "kubernetes", None),
    ({"proxy-url": "http://proxy.example:3128"}, False, None, "http://proxy.example:3128"),
])
def test_cluster_settings(tmp_path: Path, cluster: dict[str, Any], verify: bool,
                          server_hostname: str | None, proxy: str | None) -> None:
    endpoint = load_endpoint(_write(tmp_path, _config(cluster=cluster)))
    assert endpoint.ssl_context is not None
    assert (endpoint.ssl_context.verify_mode == ssl.CERT_REQUIRED) is verify
    assert endpoint.server_hostname == server_hostname
    assert endpoint.proxy == proxy


def test_plain_http_has_no_tls(tmp_path: Path) -> None:
    doc = _config(cluster={"server": "http://127.0.0.1:8080"})
    assert load_endpoint(_write(tmp_path, doc)).ssl_context is None


@pytest.mark.parametrize(("server", "no_proxy", "proxied"), [
    ("https://api.example:6443", "", True),
    ("https://api.example:6443", "api.example", False),
    ("https://api.example:6443", "other.example,.example", False),
    ("https://api.example:6443", "*", False),
    ("https://api.example.com:6443", "example", True),  # a suffix matches whole labels only
    ("https://10.1.2.3:6443", "10.0.0.0/8", False),  # CIDR ranges, as Go's rules
    ("https://10.1.2.3:6443", "192.168.0.0/16", True),
    ("https://127.0.0.1:6443", "", False),  # loopback is never proxied, as in Go
    ("https://localhost:6443", "", False),
    ("https://[::1]:6443", "", False),
])
def test_environment_proxy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: str,
                           no_proxy: str, proxied: bool) -> None:
    path = _write(tmp_path, _config(cluster={"server": server}))
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("NO_PROXY", no_proxy)
    assert load_endpoint(path).proxy == ("http://proxy.example:3128" if proxied else None)


def test_proxy_credentials_go_in_a_header_not_the_url(tmp_path: Path) -> None:
    doc = _config(cluster={"proxy-url": "http://ann:p%40ss@proxy.example:3128"})
    endpoint = load_endpoint(_write(tmp_path, doc))
    assert endpoint.proxy == "http://proxy.example:3128"
    assert endpoint.proxy_headers == {"Proxy-Authorization": "Basic " + _b64(b"ann:p@ss")}


def test_forgiving_forms_kubectl_accepts(tmp_path: Path, certs: dict[str, Pair]) -> None:
    """A server without a scheme is https; base64 data may be wrapped over lines; a file
    missing from a list of kubeconfigs is skipped."""
    pem = certs["ca"][0].read_bytes()
    wrapped = "\n".join(_b64(pem)[i:i + 64] for i in range(0, len(_b64(pem)), 64))
    doc = _config(cluster={"server": "127.0.0.1:6443", "insecure-skip-tls-verify": False,
                           "certificate-authority-data": wrapped})
    path = _write(tmp_path, doc)
    endpoint = load_endpoint(f"{tmp_path / 'missing'}:{path}")
    assert endpoint.host == "https://127.0.0.1:6443"
    assert endpoint.ssl_context is not None
    assert endpoint.ssl_context.verify_mode == ssl.CERT_REQUIRED


def test_merged_files_first_entry_and_current_context_win(tmp_path: Path) -> None:
    first = _config(user={"token": "first"})
    del first["current-context"]
    second = _config(user={"token": "second"}, cluster={"server": "https://other:1"})
    second["contexts"].append({"name": "y", "context": {"cluster": "c", "user": "u"}})
    second["current-context"] = "y"
    paths = ":".join([_write(tmp_path, first, "a"), _write(tmp_path, second, "b")])
    endpoint = load_endpoint(paths)
    assert endpoint.host == SERVER
    assert dict(endpoint.credentials()) == {"Authorization": "Bearer first"}
    assert load_endpoint(paths, context="x").host == SERVER


@pytest.mark.parametrize(("doc", "message"), [
    ("clusters: [", "kubeconfig:"),
    (["a list"], "must be a mapping"),
    ({**_config(), "current-context": ""}, "current-context: not set"),
    ({**_config(), "current-context": "nope"}, "contexts: no entry named 'nope'"),
    ({**_config(), "clusters": {"c": {}}}, "clusters: must be a list"),
    ({**_config(), "contexts": [{"name": "x", "context": {"user": "u"}}]},
     "contexts[x].context.cluster: must be a non-empty string"),
    ({**_config(), "contexts": [{"name": "x", "context": {"cluster": "gone"}}]},
     "clusters: no entry named 'gone'"),
    (_config(cluster={"server": ""}), "clusters[c].cluster.server: must be a non-empty string"),
    (_config(cluster={"server": "ftp://x"}), "clusters[c].cluster.server: 'ftp://x' is not"),
    (_config(cluster={"certificate-authority-data": "%%%"}),
     "clusters[c].cluster.certificate-authority-data: not base64"),
    (_config(cluster={"certificate-authority": "/etc/hosts"}),
     "clusters[c].cluster.insecure-skip-tls-verify: a certificate authority cannot"),
    (_config(cluster={"insecure-skip-tls-verify": False, "certificate-authority": "/nonexistent"}),
     "clusters[c].cluster.certificate-authority: cannot load /nonexistent"),
    (_config(user={"client-certificate": "/etc/hosts"}),
     "users[u].user.client-key: a client certificate needs both"),
    (_config(user={"client-key-data": _b64(b"key")}),
     "users[u].user.client-certificate: a client certificate needs both"),
    (_config(user={"client-certificate": "/etc/hosts", "client-key": "/etc/hosts"}),
     "users[u].user.client-certificate: cannot load the certificate and key"),
    (_config(user={"token": "t", "username": "ann"}),
     "users[u].user: a token and a username/password were both given"),
    (_config(user={"as": "someone"}), "users[u].user.as: impersonation is not supported"),
    (_config(user={"tokenFile": "missing.txt"}), "missing.txt: cannot read the token"),
    (_config(cluster={"proxy-url": "socks5://proxy.example:1080"}),
     "clusters[c].cluster.proxy-url: socks5 proxy is not supported"),
])
def test_bad_kubeconfig_names_the_field(tmp_path: Path, doc: Any, message: str) -> None:
    with pytest.raises(CredentialsError) as raised:
        load_endpoint(_write(tmp_path, doc))
    assert message in str(raised.value)


def test_client_wraps_the_error_with_its_source(tmp_path: Path) -> None:
    path = _write(tmp_path, _config(user={"as": "someone"}))
    with pytest.raises(ApiError, match=f"cannot load credentials from {path}: users"):
        KubeClient(ClientSettings(kubeconfig=path))


def test_explicit_token_replaces_the_kubeconfig_credential(tmp_path: Path) -> None:
    client = KubeClient(ClientSettings(kubeconfig=_write(tmp_path, _config(
        user={"token": "kubeconfig"})), token="sa"))
    assert dict(client.endpoint.credentials()) == {"Authorization": "Bearer sa"}


def _account(tmp_path: Path, token: str = "t1", ca: bytes = b"") -> Path:
    (tmp_path / "token").write_text(token)
    (tmp_path / "ca.crt").write_bytes(ca)
    return tmp_path


@pytest.mark.parametrize(("environ", "token", "message"), [
    ({}, "t1", "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset"),
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "t1", "are unset"),
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, "",
     "the token file is empty"),
])
def test_in_cluster_errors(tmp_path: Path, environ: dict[str, str], token: str,
                           message: str) -> None:
    with pytest.raises(CredentialsError) as raised:
        in_cluster_endpoint(environ, _account(tmp_path, token))
    assert message in str(raised.value)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pair]:
    """A CA; a server certificate for 127.0.0.1, one for the name 'kubernetes' only; a
    client certificate; and a second, unrelated CA."""
    directory = tmp_path_factory.mktemp("certs")
    made: dict[str, Pair] = {}

    def make(name: str, ext: list[str], ca: str = "") -> None:
        made[name] = (directory / f"{name}.crt", directory / f"{name}.key")
        _self_or_ca_signed(*made[name], name, ext, made[ca] if ca else None)

    def leaf(usage: str, sans: str = "") -> list[str]:
        ext = ["basicConstraints = critical,CA:FALSE", f"extendedKeyUsage = {usage}"]
        return ext + ([f"subjectAltName = {sans}"] if sans else [])

    make("ca", CA_EXT)
    make("other-ca", CA_EXT)
    make("by-ip", leaf("serverAuth", "IP:127.0.0.1"), "ca")
    make("by-name", leaf("serverAuth", "DNS:kubernetes"), "ca")
    make("scheduler", leaf("clientAuth"), "ca")
    make("by-other", leaf("serverAuth", "IP:127.0.0.1"), "other-ca")
    return made


class _WhoAmI(BaseHTTPRequestHandler):
    """Answers with the client certificate's common name and the Authorization header."""

    def do_GET(self) -> None:
        peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) \
            else None
        subject = dict(item[0] for item in (peer or {}).get("subject", ()))
        body = yaml.safe_dump({"cn": subject.get("commonName", ""), "path": self.path,
                               "auth": self.headers.get("Authorization", "")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def serve(certs: dict[str, Pair]) -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(cert: str) -> str:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*certs[cert])
        context.load_verify_locations(cafile=str(certs["ca"][0]))
        context.verify_mode = ssl.CERT_OPTIONAL
        server = ThreadingHTTPServer(("127.0.0.1", 0), _WhoAmI)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"https://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _who(tmp_path: Path, server: str, cluster: dict[str, Any],
         user: dict[str, Any]) -> dict[str, str]:
    doc = _config(cluster={"server": server, "insecure-skip-tls-verify": False, **cluster},
                  user=user)
    client = KubeClient(ClientSettings(kubeconfig=_write(tmp_path, doc)))
    try:
        answer = client._call("GET", "/whoami")
        return dict(yaml.safe_load(answer.data))
    finally:
        client.close()


def test_tls_with_inline_ca_and_client_certificate(tmp_path: Path, certs: dict[str, Pair],
                                                   serve: Any) -> None:
    server = serve("by-ip")
    ca, (cert, key) = certs["ca"][0], certs["scheduler"]
    answer = _who(tmp_path, server, {"certificate-authority-data": _b64(ca.read_bytes())},
                  {"client-certificate-data": _b64(cert.read_bytes()),
                   "client-key-data": _b64(key.read_bytes()), "token": "t"})
    assert answer == {"cn": "scheduler", "auth": "Bearer t", "path": "/whoami"}
    # The same with files named relative to the kubeconfig.
    (tmp_path / "pki").mkdir()
    for source, name in ((ca, "ca.crt"), (cert, "c.crt"), (key, "c.key")):
        (tmp_path / "pki" / name).write_bytes(source.read_bytes())
    answer = _who(tmp_path, server, {"certificate-authority": "pki/ca.crt"},
                  {"client-certificate": "pki/c.crt", "client-key": "pki/c.key"})
    assert answer == {"cn": "scheduler", "auth": "", "path": "/whoami"}


def test_tls_server_name_is_what_the_certificate_is_checked_against(
        tmp_path: Path, certs: dict[str, Pair], serve: Any) -> None:
    server = serve("by-name")
    ca = {"certificate-authority": str(certs["ca"][0])}
    with pytest.raises(ApiError, match="cannot reach the API server"):
        _who(tmp_path, server, ca, {})
    assert _who(tmp_path, server, {**ca, "tls-server-name": "kubernetes"}, {})["cn"] == ""


def test_an_unknown_ca_is_refused_unless_verification_is_skipped(
        tmp_path: Path, certs: dict[str, Pair], serve: Any) -> None:
    server = serve("by-ip")
    # A server URL with a path (a proxy in front of several clusters) keeps it.
    assert _who(tmp_path, server + "/clusters/c1/", {"insecure-skip-tls-verify": True},
                {})["path"] == "/clusters/c1/whoami"
    with pytest.raises(ApiError, match="CERTIFICATE_VERIFY_FAILED"):
        _who(tmp_path, server, {"certificate-authority": str(certs["other-ca"][0])}, {})
    assert _who(tmp_path, server, {"insecure-skip-tls-verify": True}, {})["cn"] == ""


def test_a_configured_ca_is_the_only_one_trusted(
        tmp_path: Path, certs: dict[str, Pair], serve: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The system's CAs (here: other-ca, through SSL_CERT_FILE) are trusted only when the
    kubeconfig names no CA, as in client-go."""
    server = serve("by-other")
    monkeypatch.setenv("SSL_CERT_FILE", str(certs["other-ca"][0]))
    assert _who(tmp_path, server, {}, {})["path"] == "/whoami"
    with pytest.raises(ApiError, match="CERTIFICATE_VERIFY_FAILED"):
        _who(tmp_path, server, {"certificate-authority": str(certs["ca"][0])}, {})


def test_in_cluster_service_account(tmp_path: Path, certs: dict[str, Pair], serve: Any,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    server = serve("by-ip")
    host, port = server.removeprefix("https://").split(":")
    account = _account(tmp_path, "sa-token", certs["ca"][0].read_bytes())
    clock = [1000.0]
    monkeypatch.setattr(kubeconfig.time, "monotonic", lambda: clock[0])
    endpoint = in_cluster_endpoint({"KUBERNETES_SERVICE_HOST": host,
                                    "KUBERNETES_SERVICE_PORT": port}, account)
    client = KubeClient(ClientSettings(), endpoint)
    assert yaml.safe_load(client._call("GET", "/").data)["auth"] == "Bearer sa-token"
    # The kubelet rotates the token in place; it is read again after the period.
    (account / "token").write_text("rotated")
    clock[0] += kubeconfig.TOKEN_FILE_PERIOD - 1
    assert dict(endpoint.credentials()) == {"Authorization": "Bearer sa-token"}
    clock[0] += 1
    assert dict(endpoint.credentials()) == {"Authorization": "Bearer rotated"}
    # A failed read keeps the last good token.
    (account / "token").unlink()
    clock[0] += kubeconfig.TOKEN_FILE_PERIOD
    assert dict(endpoint.credentials()) == {"Authorization": "Bearer rotated"}
    client.close()


EXEC_PLUGIN = """
import json, pathlib, sys
runs = pathlib.Path(sys.argv[1])
runs.write_text(runs.read_text() + "x" if runs.exists() else "x")
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1",
                  "kind": "ExecCredential",
                  "status": {"token": "from-exec", "expirationTimestamp": sys.argv[2]}}))
"""


def test_exec_plugin_runs_through_the_kubernetes_package_at_most_once_a_second(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin, runs = tmp_path / "plugin.py", tmp_path / "runs"
    plugin.write_text(EXEC_PLUGIN)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                     "command": sys.executable,
                     "args": [str(plugin), str(runs), "2000-01-01T00:00:00Z"]}}
    endpoint = load_endpoint(_write(tmp_path, _config(user=user)))
    clock = [1000.0]
    monkeypatch.setattr(kubeconfig.time, "monotonic", lambda: clock[0])
    after_load = len(runs.read_text())
    for _ in range(50):  # the credential has expired: each refresh runs the plugin
        assert dict(endpoint.credentials()) == {"Authorization": "Bearer from-exec"}
    assert len(runs.read_text()) == after_load + 1
    clock[0] += kubeconfig.REFRESH_INTERVAL
    endpoint.credentials()
    endpoint.credentials()
    assert len(runs.read_text()) == after_load + 2


def test_requests_go_through_the_proxy_url(tmp_path: Path) -> None:
    """A plain-HTTP server behind ``proxy-url``: the proxy gets the request, addressed to
    the server."""
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _WhoAmI)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        doc = _config(cluster={"server": "http://api.invalid:8080",
                               "proxy-url": f"http://127.0.0.1:{proxy.server_address[1]}"},
                      user={"token": "t"})
        client = KubeClient(ClientSettings(kubeconfig=_write(tmp_path, doc)))
        answer = yaml.safe_load(client._call("GET", "/api", query={"a": "b"}).data)
        assert answer["path"] == "http://api.invalid:8080/api?a=b"
        assert answer["auth"] == "Bearer t"
        client.close()
    finally:
        proxy.shutdown()
        proxy.server_close()


@pytest.mark.parametrize(("cluster", "user", "warned"), [
    ({"server": "http://127.0.0.1:8080"}, {"token": "t0ps3cret"}, "server is plain http"),
    ({"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True},
     {"username": "u", "password": "t0ps3cret"}, "insecure-skip-tls-verify is true"),
    ({"server": "http://127.0.0.1:8080"}, {}, ""),  # nothing secret to send
    ({"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": False},
     {"token": "t0ps3cret"}, ""),  # verified TLS
])
def test_a_secret_sent_where_anyone_may_read_it_is_warned_of(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, cluster: dict[str, Any],
        user: dict[str, Any], warned: str) -> None:
    with caplog.at_level("WARNING", logger="coscheduling.cluster.kubeconfig"):
        load_endpoint(_write(tmp_path, _config(cluster, user)))
    messages = [r.getMessage() for r in caplog.records]
    if warned:
        assert len(messages) == 1 and warned in messages[0], messages
        assert "t0ps3cret" not in messages[0]  # the secret itself is never logged
    else:
        assert messages == []


# -- kubectl's order of credentials (issue 29) --------------------------------------------
def test_kubectl_order_of_kubeconfigs(tmp_path: Path) -> None:
    from coscheduling.cluster.kubeconfig import kubectl_kubeconfig

    home = tmp_path / "home"
    assert kubectl_kubeconfig("", {}, home) == ""  # nothing found: in-cluster
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("{}")
    assert kubectl_kubeconfig("", {}, home) == str(home / ".kube" / "config")
    assert kubectl_kubeconfig("", {"KUBECONFIG": "a:b"}, home) == "a:b"
    assert kubectl_kubeconfig("flag", {"KUBECONFIG": "a:b"}, home) == "flag"


def test_context_namespace_is_kubectls_default_namespace(tmp_path: Path) -> None:
    from coscheduling.cluster.kubeconfig import context_namespace

    config = tmp_path / "config"
    config.write_text(yaml.safe_dump({
        "current-context": "a",
        "contexts": [{"name": "a", "context": {"cluster": "c", "namespace": "team-a"}},
                     {"name": "b", "context": {"cluster": "c"}}],
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}]}))
    assert context_namespace(str(config)) == "team-a"
    assert context_namespace(str(config), "b") == ""
    with pytest.raises(CredentialsError, match="contexts: no entry named 'nope'"):
        context_namespace(str(config), "nope")
