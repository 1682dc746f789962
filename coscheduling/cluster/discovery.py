"""Watch only the kinds of object (other producers' group objects) the API server serves,
and pick up a kind whose CRD (or API) appears later without a restart: unserved kinds are
looked for again every ``interval`` seconds through discovery, which needs no permission
beyond authentication."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.cluster.informer import Informer

log = logging.getLogger(__name__)

DISCOVERY_INTERVAL = 10.0


class ServedKind(Protocol):
    """A kind of object that an API group may or may not serve."""

    @property
    def title(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def plural(self) -> str: ...
    @property
    def api_version(self) -> str: ...


Kind = TypeVar("Kind", bound=ServedKind)


class GroupDiscovery(Generic[Kind]):
    def __init__(self, client: KubeClient, apis: Sequence[Kind],
                 make_informer: Callable[[Kind], Informer[Any]],
                 interval: float = DISCOVERY_INTERVAL) -> None:
        self.client = client
        self.make_informer = make_informer
        self.interval = interval
        self.watched: dict[str, Informer[Any]] = {}  # api_version -> its informer
        self._unserved = list(apis)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def served(self, api: Kind) -> bool:
        try:
            listing = self.client.get(f"/apis/{api.group}/{api.version}")
        except ApiError as err:
            if err.not_found:
                return False
            raise
        return any(r.get("name") == api.plural for r in listing.get("resources") or ())

    def discover(self) -> list[Informer[Any]]:
        """Informers (not started) for the kinds served now that were not before."""
        found: list[Informer[Any]] = []
        for api in list(self._unserved):
            try:
                if not self.served(api):
                    continue
            except ApiError as err:
                log.warning("discovery of %s failed: %s", api.title, err)
                continue
            log.info("watching %s", api.title)
            self._unserved.remove(api)
            informer = self.watched[api.api_version] = self.make_informer(api)
            found.append(informer)
        return found

    def start(self, on_found: Callable[[Informer[Any]], None]) -> None:
        """Look for the unserved kinds in the background; ``on_found`` starts each."""
        def run() -> None:
            while not self._stop.wait(self.interval) and self._unserved:
                for informer in self.discover():
                    on_found(informer)
        self._thread = threading.Thread(target=run, name="group-discovery", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
