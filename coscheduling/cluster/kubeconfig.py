"""Where the API server is, and how to prove who we are: read from a kubeconfig or from the
pod's service account.

This reads kubeconfigs itself rather than through the kubernetes package, whose generated
model classes would be most of the scheduler's memory. A kubeconfig whose user runs an
``exec`` or ``auth-provider`` plugin is handed to that package's loader (imported then
only), so every credential kubectl accepts still works.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
import os
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit
from urllib.request import getproxies

import urllib3
import yaml
from urllib3.connection import HTTPConnection

from coscheduling.cluster.http_wire import RETRY_AFTER_MAX
from coscheduling.config.errors import ConfigError, as_list, as_mapping

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_FILE_PERIOD = 60.0
"""Seconds a token read from a file is used before the file is read again (client-go's
period): the kubelet rotates projected service-account tokens in place."""

REFRESH_INTERVAL = 1.0
"""Seconds between refreshes of a plugin credential. The kubernetes package's refresh hook
re-applies the whole kubeconfig before every request; an expiring token is still reloaded
within this much of its expiry."""

PLUGIN_FIELDS = ("exec", "auth-provider")
"""User fields whose credential comes from a plugin: those users go to the kubernetes
package's loader."""

UNSUPPORTED_FIELDS = {
    "as": "impersonation", "as-uid": "impersonation", "as-groups": "impersonation",
    "as-user-extra": "impersonation",
}
"""User fields a scheduler must not ignore silently: it would act as another identity."""

KEEPALIVE = [*HTTPConnection.default_socket_options, (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]

Headers = Mapping[str, str]

log = logging.getLogger(__name__)


class CredentialsError(Exception):
    """A kubeconfig or service account the scheduler cannot use; says which field and why."""


def _no_credentials() -> Headers:
    return {}


@dataclass(frozen=True)
class Endpoint:
    """An API server address, its TLS settings, and the headers that authenticate us."""

    host: str
    ssl_context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    proxy: str | None = None
    proxy_headers: Mapping[str, str] = field(default_factory=dict)
    credentials: Callable[[], Headers] = field(default=_no_credentials, compare=False)

    def with_token(self, token: str) -> Endpoint:
        """The same server with a bearer token that replaces the configured credential."""
        header = {"Authorization": "Bearer " + token}
        return replace(self, credentials=lambda: header)

    def pool(self, maxsize: int) -> urllib3.PoolManager:
        """A connection pool to this server, through its proxy when it has one."""
        # urllib3's default retries, with Retry-After capped as the client's own exchange
        # caps it (urllib3 waits up to 6 hours: a watch would stall that long).
        options: dict[str, Any] = {"num_pools": 4, "maxsize": maxsize,
                                   "socket_options": KEEPALIVE, "retries": urllib3.Retry(
                                       3, retry_after_max=int(RETRY_AFTER_MAX))}
        if self.ssl_context is not None:
            verify = self.ssl_context.verify_mode != ssl.CERT_NONE
            options["ssl_context"] = self.ssl_context
            options["cert_reqs"] = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
            options["assert_hostname"] = None if verify else False
            if self.server_hostname:
                options["server_hostname"] = self.server_hostname
        if self.proxy:
            return urllib3.ProxyManager(self.proxy, proxy_headers=dict(self.proxy_headers),
                                        **options)
        return urllib3.PoolManager(**options)


def load_endpoint(kubeconfig: str, context: str = "") -> Endpoint:
    """The endpoint a kubeconfig names (its current context, or ``context``); with no
    kubeconfig, the in-cluster service account's. ``kubeconfig`` may list several files
    separated by the path separator, merged as kubectl merges ``KUBECONFIG``."""
    if not kubeconfig:
        return in_cluster_endpoint(os.environ, SERVICE_ACCOUNT_DIR)
    try:
        return _from_kubeconfig(kubeconfig, context)
    except ConfigError as err:  # a malformed structure, found by the shared validators
        raise CredentialsError(str(err)) from err


def _from_kubeconfig(kubeconfig: str, context: str) -> Endpoint:
    paths = [Path(p) for p in kubeconfig.split(os.pathsep) if p]
    if len(paths) > 1:  # files missing from a list are skipped, as kubectl skips them
        paths = [p for p in paths if p.exists()] or paths[:1]
    merged = _merge(paths)
    name = context or merged.current_context
    if not name:
        raise CredentialsError("current-context: not set, and no context was asked for")
    ctx, _ = merged.find("contexts", name, "context")
    cluster_name = _text(ctx.get("cluster"), f"contexts[{name}].context.cluster")
    user_name = str(ctx.get("user") or "")
    cluster, cluster_dir = merged.find("clusters", cluster_name, "cluster")
    user, user_dir = merged.find("users", user_name, "user") if user_name else ({}, Path())
    if any(key in user for key in PLUGIN_FIELDS):
        return _plugin_endpoint(kubeconfig, name)
    for key, what in UNSUPPORTED_FIELDS.items():
        if key in user:
            raise CredentialsError(f"users[{user_name}].user.{key}: {what} is not supported")
    return _endpoint(cluster, cluster_dir, f"clusters[{cluster_name}].cluster",
                     user, user_dir, f"users[{user_name}].user")


def kubectl_kubeconfig(flag: str = "", environ: Mapping[str, str] | None = None,
                       home: Path | None = None) -> str:
    """The kubeconfig kubectl would use: ``--kubeconfig``, else ``$KUBECONFIG`` (a list of
    files), else ``~/.kube/config`` when it exists; "" means the in-cluster service account.
    A person types the same flags to this scheduler's commands as to kubectl."""
    environ = os.environ if environ is None else environ
    if flag:
        return flag
    if environ.get("KUBECONFIG"):
        return environ["KUBECONFIG"]
    default = (home if home is not None else Path.home()) / ".kube" / "config"
    return str(default) if default.is_file() else ""


def context_namespace(kubeconfig: str, context: str = "") -> str:
    """The namespace a kubeconfig's context (its current one, or ``context``) names, as
    kubectl defaults ``-n`` to it; "" when it names none (or there is no kubeconfig: in a
    pod, kubectl uses the pod's own namespace, read from the service account)."""
    if not kubeconfig:
        namespace_file = SERVICE_ACCOUNT_DIR / "namespace"
        return namespace_file.read_text().strip() if namespace_file.is_file() else ""
    paths = [Path(p) for p in kubeconfig.split(os.pathsep) if p]
    merged = _merge([p for p in paths if p.exists()] or paths[:1])
    name = context or merged.current_context
    if not name:
        return ""
    try:
        ctx, _ = merged.find("contexts", name, "context")
    except ConfigError as err:
        raise CredentialsError(str(err)) from err
    return str(ctx.get("namespace") or "")


def in_cluster_endpoint(environ: Mapping[str, str], account: Path) -> Endpoint:
    """The API server a pod reaches through the ``kubernetes`` Service, as its service
    account (token re-read as the kubelet rotates it)."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise CredentialsError("no kubeconfig was given, and this is not a pod: "
                               "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset")
    if ":" in host:
        host = f"[{host}]"
    token = _FileToken(account / "token")
    token.read()  # a missing or empty token is an error now, not at the first request
    ca = account / "ca.crt"
    if not ca.is_file():
        raise CredentialsError(f"{ca}: the service account's CA certificate is missing")
    server = f"https://{host}:{port}"
    proxy, proxy_headers = _proxy_for(server, "", "")
    return Endpoint(host=server, ssl_context=_tls(cafile=str(ca)), proxy=proxy,
                    proxy_headers=proxy_headers,
                    credentials=lambda: {"Authorization": "Bearer " + token.read()})


@dataclass
class _Merged:
    """kubeconfig files merged: the first file to name an entry or a current-context wins."""

    entries: dict[tuple[str, str], tuple[Mapping[str, Any], Path]] = field(default_factory=dict)
    current_context: str = ""

    def find(self, section: str, name: str, inner: str) -> tuple[Mapping[str, Any], Path]:
        if (section, name) not in self.entries:
            raise CredentialsError(f"{section}: no entry named {name!r}")
        body, base = self.entries[section, name]
        return as_mapping(body.get(inner), f"{section}[{name}].{inner}"), base


def _merge(paths: list[Path]) -> _Merged:
    merged = _Merged()
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise CredentialsError(f"{path}: {err}") from err
        doc = as_mapping(doc, str(path))
        merged.current_context = merged.current_context or str(doc.get("current-context") or "")
        for section in ("clusters", "users", "contexts"):
            for index, entry in enumerate(as_list(doc.get(section), f"{path}: {section}")):
                entry = as_mapping(entry, f"{path}: {section}[{index}]")
                name = _text(entry.get("name"), f"{path}: {section}[{index}].name")
                merged.entries.setdefault((section, name), (entry, path.parent))
    return merged


def _endpoint(cluster: Mapping[str, Any], cluster_dir: Path, cluster_field: str,
              user: Mapping[str, Any], user_dir: Path, user_field: str) -> Endpoint:
    server = _text(cluster.get("server"), f"{cluster_field}.server")
    if "://" not in server:
        server = "https://" + server  # as client-go's DefaultServerURL
    scheme = urlsplit(server).scheme
    if scheme not in ("https", "http"):
        raise CredentialsError(f"{cluster_field}.server: {server!r} is not an http(s) URL")
    context = None
    if scheme == "https":
        insecure = cluster.get("insecure-skip-tls-verify") is True
        ca_data = _decoded(cluster.get("certificate-authority-data"),
                           f"{cluster_field}.certificate-authority-data")
        # Inline data overrides the file, as in client-go.
        ca_file = "" if ca_data else _path(cluster.get("certificate-authority"), cluster_dir)
        if insecure and (ca_file or ca_data):
            raise CredentialsError(f"{cluster_field}.insecure-skip-tls-verify: a certificate "
                                   "authority cannot be given with it")
        context = _tls(cafile=ca_file, cadata=ca_data, insecure=insecure,
                       where=f"{cluster_field}.certificate-authority")
        _client_certificate(context, user, user_dir, user_field)
    _warn_if_exposed(user, user_field, scheme == "http",
                     scheme == "https" and cluster.get("insecure-skip-tls-verify") is True,
                     cluster_field)
    proxy, proxy_headers = _proxy_for(server, str(cluster.get("proxy-url") or ""),
                                      f"{cluster_field}.proxy-url")
    return Endpoint(host=server.rstrip("/"), ssl_context=context,
                    server_hostname=str(cluster.get("tls-server-name") or "") or None,
                    proxy=proxy, proxy_headers=proxy_headers,
                    credentials=_user_credentials(user, user_dir, user_field))


def _warn_if_exposed(user: Mapping[str, Any], user_field: str, plain: bool, unverified: bool,
                     cluster_field: str) -> None:
    """A token or password sent over plain http, or to a server whose certificate is not
    checked, may be read by whoever is in between: allowed (kubectl allows it), said loudly."""
    secret = next((key for key in ("token", "tokenFile", "password") if user.get(key)), "")
    if not secret or not (plain or unverified):
        return
    how = (f"{cluster_field}.server is plain http" if plain else
           f"{cluster_field}.insecure-skip-tls-verify is true")
    log.warning("%s.%s is sent to the API server although %s: anyone between can read it",
                user_field, secret, how)


def _user_credentials(user: Mapping[str, Any], base: Path,
                      user_field: str) -> Callable[[], Headers]:
    token_file = _path(user.get("tokenFile"), base)
    if (token_file or user.get("token")) and (user.get("username") or user.get("password")):
        raise CredentialsError(f"{user_field}: a token and a username/password were both "
                               "given; only one is allowed")
    if token_file:
        source = _FileToken(Path(token_file), fallback=str(user.get("token") or ""))
        source.read()
        return lambda: {"Authorization": "Bearer " + source.read()}
    if user.get("token"):
        header = {"Authorization": "Bearer " + _text(user["token"], f"{user_field}.token")}
        return lambda: header
    if user.get("username") or user.get("password"):
        pair = f"{user.get('username') or ''}:{user.get('password') or ''}".encode()
        header = {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        return lambda: header
    return _no_credentials


def _client_certificate(context: ssl.SSLContext, user: Mapping[str, Any], base: Path,
                        user_field: str) -> None:
    cert_data = _decoded(user.get("client-certificate-data"),
                         f"{user_field}.client-certificate-data")
    key_data = _decoded(user.get("client-key-data"), f"{user_field}.client-key-data")
    cert_file = "" if cert_data else _path(user.get("client-certificate"), base)
    key_file = "" if key_data else _path(user.get("client-key"), base)
    has_cert, has_key = bool(cert_file or cert_data), bool(key_file or key_data)
    if has_cert != has_key:
        missing = "client-key" if has_cert else "client-certificate"
        raise CredentialsError(f"{user_field}.{missing}: a client certificate needs both "
                               "a certificate and its key")
    if not has_cert:
        return
    with _pem_files(cert_file, cert_data, key_file, key_data) as (cert, key):
        try:
            context.load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as err:
            raise CredentialsError(f"{user_field}.client-certificate: cannot load the "
                                   f"certificate and key: {err}") from err


@contextmanager
def _pem_files(cert_file: str, cert_data: bytes, key_file: str,
               key_data: bytes) -> Iterator[tuple[str, str]]:
    """The certificate and key as files (``ssl`` loads only files); inline data lives in a
    private directory only while it is loaded."""
    if not cert_data and not key_data:
        yield cert_file, key_file
        return
    with tempfile.TemporaryDirectory(prefix="coscheduling-") as directory:
        cert, key = cert_file, key_file
        if cert_data:
            cert = os.path.join(directory, "client.crt")
            Path(cert).write_bytes(cert_data)
        if key_data:
            key = os.path.join(directory, "client.key")
            Path(key).write_bytes(key_data)
        yield cert, key


def _tls(cafile: str = "", cadata: bytes = b"", insecure: bool = False,
         where: str = "certificate-authority") -> ssl.SSLContext:
    """A client TLS context. A configured CA is the only one trusted, as in client-go; the
    system's CAs are trusted only when no CA is configured."""
    if insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        return ssl.create_default_context(
            cafile=cafile or None, cadata=cadata.decode(errors="replace") if cadata else None)
    except (ssl.SSLError, OSError) as err:
        raise CredentialsError(f"{where}: cannot load {cafile or 'the data'}: {err}") \
            from err


class _FileToken:
    """A bearer token read from a file, re-read every TOKEN_FILE_PERIOD seconds; the last
    good value is kept if a later read fails."""

    def __init__(self, path: Path, fallback: str = "") -> None:
        self.path = path
        self._value = fallback
        self._read_at = -TOKEN_FILE_PERIOD
        self._lock = threading.Lock()

    def read(self) -> str:
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= TOKEN_FILE_PERIOD:
                try:
                    value = self.path.read_text().strip()
                except OSError as err:
                    if not self._value:
                        raise CredentialsError(f"{self.path}: cannot read the token: "
                                               f"{err}") from err
                    value = ""
                if not value and not self._value:
                    raise CredentialsError(f"{self.path}: the token file is empty")
                self._value = value or self._value
                self._read_at = now
            return self._value


def _plugin_endpoint(kubeconfig: str, context: str) -> Endpoint:
    """A user whose credential a plugin makes: the kubernetes package's loader runs it."""
    # Imported here only: most of its memory is models this path does not need.
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    configuration = k8s_client.Configuration()
    try:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=configuration,
            persist_config=False)
    except Exception as err:  # the loader raises many kinds; each is a bad kubeconfig
        raise CredentialsError(f"users: the credential plugin failed: {err}") from err
    tls = None
    if str(configuration.host).startswith("https"):
        tls = _tls(cafile=configuration.ssl_ca_cert or "",
                   insecure=not configuration.verify_ssl)
        if configuration.cert_file:
            try:
                tls.load_cert_chain(configuration.cert_file, configuration.key_file)
            except (ssl.SSLError, OSError) as err:
                raise CredentialsError(f"users: the plugin's client certificate cannot be "
                                       f"loaded: {err}") from err
    hook = configuration.refresh_api_key_hook
    if hook is not None:
        # The package runs this hook from auth_settings(), before every request.
        configuration.refresh_api_key_hook = _at_most_every(REFRESH_INTERVAL, hook)

    def credentials() -> Headers:
        auth = configuration.auth_settings().get("BearerToken")
        return {"Authorization": str(auth["value"])} if auth and auth.get("value") else {}

    proxy, proxy_headers = _proxy_for(str(configuration.host), configuration.proxy or "",
                                      "clusters: proxy-url")
    return Endpoint(host=str(configuration.host), ssl_context=tls,
                    server_hostname=configuration.tls_server_name or None,
                    proxy=proxy, proxy_headers=proxy_headers, credentials=credentials)


def _at_most_every(seconds: float, hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """The package's refresh hook, run at most once per ``seconds``."""
    last = -seconds
    lock = threading.RLock()  # the hook may read the credential itself

    def refresh(configuration: Any) -> None:
        nonlocal last
        with lock:
            now = time.monotonic()
            if now - last < seconds:
                return
            last = now
            hook(configuration)
            # The loader's hook installs itself again each time it runs.
            configuration.refresh_api_key_hook = refresh

    return refresh


def _environment_proxy(server: str) -> str:
    """HTTPS_PROXY / HTTP_PROXY for this server, as Go's ProxyFromEnvironment chooses it:
    never for localhost or a loopback address, nor for a host NO_PROXY names (a name, a
    domain suffix, an address or a CIDR range)."""
    parts = urlsplit(server)
    host = (parts.hostname or "").lower()
    if not host or host == "localhost" or _is_loopback(host) or _no_proxy(host):
        return ""
    return getproxies().get(parts.scheme, "")


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _no_proxy(host: str) -> bool:
    entries = (os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or "").split(",")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = \
            ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (e.strip().lower() for e in entries):
        if not entry:
            continue
        if entry == "*":
            return True
        if address is not None and "/" in entry:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name = entry.rsplit(":", 1)[0] if entry.count(":") == 1 else entry
        name = name.removeprefix("*").removeprefix(".")
        if host == name or host.endswith("." + name):
            return True
    return False


def _proxy_for(server: str, configured: str, where: str) -> tuple[str | None, dict[str, str]]:
    """The proxy for ``server``: the configured one, else the environment's."""
    if configured:
        return _proxy(configured, where)
    from_environment = _environment_proxy(server)
    if from_environment:
        return _proxy(from_environment, "HTTPS_PROXY/HTTP_PROXY")
    return None, {}


def _proxy(url: str, where: str) -> tuple[str, dict[str, str]]:
    """A proxy URL without its credentials, and the header that carries them (urllib3
    does not send a URL's user:password to the proxy itself; Go's transport does)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise CredentialsError(f"{where}: {parts.scheme or 'a schemeless'} proxy is not "
                               "supported (only http and https proxies)")
    if parts.username is None:
        return url, {}
    bare = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return bare, {"Proxy-Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}


def _path(value: object, base: Path) -> str:
    """A file named in a kubeconfig; relative names are relative to that kubeconfig."""
    if not value:
        return ""
    return str(base / os.path.expanduser(str(value)))


def _decoded(value: object, where: str) -> bytes:
    if not value:
        return b""
    try:  # line breaks are allowed, as Go's decoder ignores them
        return base64.b64decode("".join(str(value).split()), validate=True)
    except ValueError as err:
        raise CredentialsError(f"{where}: not base64: {err}") from err


def _text(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise CredentialsError(f"{where}: must be a non-empty string")
    return value
