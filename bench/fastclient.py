"""A thin POST-only client for the harness's hot paths (pod creation, the ceiling's binds).

On 2 cores the harness competes with the API server for CPU: the generated client's
request building costs about 1.5 ms per pod, a kept-alive http.client connection per
thread about a fifth of that, which leaves the API server more of the machine.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from coscheduling.cluster.client import ApiError

TIMEOUT = 30.0


class FastClient:
    """Bearer-token kubeconfigs only (what the local cluster writes)."""

    def __init__(self, kubeconfig: Path) -> None:
        config = yaml.safe_load(Path(kubeconfig).read_text())
        context_name = config["current-context"]
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"]
                       if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        if "token" not in user:
            raise ValueError(f"{kubeconfig}: the benchmark client needs a bearer token")
        url = urlparse(cluster["server"])
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 443
        self.ssl = ssl.create_default_context()
        if "certificate-authority-data" in cluster:
            with tempfile.NamedTemporaryFile("wb", suffix=".crt") as ca:
                ca.write(base64.b64decode(cluster["certificate-authority-data"]))
                ca.flush()
                self.ssl.load_verify_locations(ca.name)
        elif "certificate-authority" in cluster:
            self.ssl.load_verify_locations(cluster["certificate-authority"])
        self.headers = {"Authorization": f"Bearer {user['token']}",
                        "Content-Type": "application/json", "Accept": "application/json"}
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        connection: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if connection is None:
            connection = http.client.HTTPSConnection(self.host, self.port, context=self.ssl,
                                                     timeout=TIMEOUT)
            self._local.conn = connection
        return connection

    def request(self, method: str, path: str, body: Any,
                content_type: str = "application/json") -> dict[str, Any]:
        """One request; the decoded answer. Raises ApiError like KubeClient (status 0 for a
        broken connection, which is closed so the next request opens a fresh one)."""
        status, data = self._exchange(method, path, json.dumps(body).encode(),
                                      {"Content-Type": content_type})
        try:
            answer = json.loads(data) if data else {}
        except ValueError:
            answer = {"message": data[:200].decode(errors="replace")}
        if status >= 300:
            raise ApiError(status, str(answer.get("message", "")), answer)
        return answer if isinstance(answer, dict) else {}

    def get_text(self, path: str, attempts: int = 3) -> str:
        """A GET whose answer is text (the API server's /metrics); a kept-alive connection
        the server closed while idle is opened again."""
        for _ in range(attempts - 1):
            try:
                return self._get_text(path)
            except ApiError as err:
                if err.status != 0:
                    raise
        return self._get_text(path)

    def _get_text(self, path: str) -> str:
        status, data = self._exchange("GET", path, None, {"Accept": "text/plain"})
        if status >= 300:
            raise ApiError(status, data[:200].decode(errors="replace"))
        return data.decode()

    def _exchange(self, method: str, path: str, payload: bytes | None,
                  headers: Mapping[str, str]) -> tuple[int, bytes]:
        """(status, body) of one request on this thread's connection; a broken connection
        is closed (the next request opens a fresh one) and raised as ApiError status 0."""
        connection = self._connection()
        try:
            connection.request(method, path, payload, {**self.headers, **headers})
            response = connection.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as err:
            connection.close()
            self._local.conn = None
            raise ApiError(0, f"{method} {path}: {err}") from err

    def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.post(f"/api/v1/namespaces/{namespace}/pods/{name}/binding", {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
