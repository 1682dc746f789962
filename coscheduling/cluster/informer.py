"""List + watch of one resource into a store of compact records.

Handles what the client library leaves to the caller: a 410 Gone (as an HTTP status or as
an ERROR event) lists again and replaces the store, sending the differences as events;
bookmarks keep the resourceVersion fresh; every read has a socket timeout, so a frozen
connection is noticed; errors back off exponentially instead of spinning.

One object the scheduler cannot read never costs the others: an object whose JSON the
decoder left a value out of (``deepjson``: nested too deeply, a number out of range) or
whose parser raised, whatever the exception, is *set aside* (recorded in
``UnreadableObjects``, which warns on it) and the list and the watch go on, so the informer
syncs. A set-aside object is not in the store: the scheduler acts only on versions it can
read, never on a stale one. An object that becomes unreadable on update therefore leaves
the store as if deleted, and comes back (an add) when a later version can be read. Kinds
whose objects must keep their effect while unreadable pass ``stand_in``: a record built
from what little is known, kept in the store in the object's place (a bound pod's stand-in
keeps its node closed to new pods, since the room it takes is unknown). Kinds passing
``keep_previous`` keep the last readable version instead while a newer one cannot be read
(a ResourceClaim: its allocation holds devices, which absence would free for another claim;
keeping it can only leave devices unused). ``record_error``
names a parse error carried by a record that is kept as it is but counts as unreadable
(a bound pod or a node whose resources could not be read).

With ``protobuf``, a built-in kind (``protobuf.kind_of``) is listed and watched as protobuf,
read into the same dicts the parser reads from JSON; the format is chosen at start-up, by
the first list's answer: a server that answers it in JSON is listened to in JSON from then
on. An object the protobuf reader cannot convert is set aside like one the JSON decoder
left a value out of.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from coscheduling.api.objectref import ObjectRef
from coscheduling.cluster import protobuf as wire_protobuf
from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.cluster.deepjson import Decoded, field_path
from coscheduling.cluster.unreadable import Unreadable, UnreadableObjects

log = logging.getLogger(__name__)

R = TypeVar("R")
SYNC_POLL = 0.25  # seconds: how often a wait for the first list looks at its stop event
Json = dict[str, Any]


class Handler(Protocol[R]):  # type: ignore[misc]
    def on_add(self, record: R) -> None: ...
    def on_update(self, old: R, new: R) -> None: ...
    def on_delete(self, record: R) -> None: ...


def resource_of(path: str) -> str:
    """The resource a list path names, as kubectl names it: ``/api/v1/pods`` -> ``pods``,
    ``/apis/resource.k8s.io/v1/resourceclaims`` -> ``resourceclaims.resource.k8s.io``."""
    parts = path.strip("/").split("/")
    if parts[0] == "apis" and len(parts) > 3:
        return f"{parts[-1]}.{parts[1]}"
    return parts[-1]


def object_key(obj: Json) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object: the key every watch's
    records use, read from metadata alone (for objects that cannot be parsed)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    return f"{namespace}/{name}" if namespace else name


def _left_out(answer: Decoded, prefix: str) -> dict[object, tuple[str, str]]:
    """What the decoder left out of ``answer`` (an object of ``deepjson.Decoded``), per
    item index (list pages, ``prefix`` "items") or for the object (watch events, ``prefix``
    "object"): (field path, why), the first value left out of each."""
    found: dict[object, tuple[str, str]] = {}
    for path, why in answer.left_out:
        if path[:1] != (prefix,) or len(path) < 2:
            continue
        where = path[1] if prefix == "items" else None
        rest = path[2:] if prefix == "items" else path[1:]
        found.setdefault(where, (field_path(rest), why))
    return found


class Informer(Generic[R]):
    def __init__(
        self,
        client: KubeClient,
        path: str,
        parse: Callable[[dict[str, Any]], R],
        key: Callable[[R], str],
        handler: Handler[R],
        *,
        field_selector: str = "",
        label_selector: str = "",
        page_size: int = 250,
        watch_read_timeout: float = 60.0,
        name: str = "",
        unreadable: UnreadableObjects | None = None,
        stand_in: Callable[[Json, str], R] | None = None,
        record_error: Callable[[R], str] | None = None,
        keep_previous: bool = False,
        object_key: Callable[[Json], str] = object_key,
        protobuf: bool = False,
    ) -> None:
        self.client = client
        self.path = path
        self.parse = parse
        self.key = key
        self.handler = handler
        self.field_selector = field_selector
        self.label_selector = label_selector
        # Small pages: a decoded page is several times the size of the records kept from it,
        # and the memory it briefly needs stays with the process. Listing 5000 pods in pages of
        # 250 peaks ~12 MiB lower than in pages of 1000, for 15 more round trips.
        self.page_size = page_size
        self.watch_read_timeout = watch_read_timeout
        self.name = name or path
        self.kind = resource_of(path)
        self.unreadable = unreadable if unreadable is not None else UnreadableObjects()
        self.stand_in = stand_in
        # The key of an object read from its metadata alone (one that cannot be parsed):
        # it must equal ``key`` of its record, e.g. namespace/name@tag for tagged groups.
        self.object_key = object_key
        self.record_error = record_error
        self.keep_previous = keep_previous
        # The kind's messages while it is read as protobuf (None: JSON).
        self.binary = wire_protobuf.kind_of(path) if protobuf else None
        self._format_chosen = False
        self._set_aside: set[str] = set()  # keys of this watch's objects set aside now
        self.store: dict[str, R] = {}
        self.resource_version = ""
        self.synced = threading.Event()
        self.relists = 0
        self.errors = 0
        self.reconnects = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"informer:{self.name}",
                                        daemon=True)
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _selectors(self) -> dict[str, Any]:
        query: dict[str, Any] = {}
        if self.field_selector:
            query["fieldSelector"] = self.field_selector
        if self.label_selector:
            query["labelSelector"] = self.label_selector
        return query

    def _run(self) -> None:
        delay = 0.2
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
                delay = 0.2
            except ApiError as err:
                if self._stop.is_set():
                    return
                if err.idle:
                    self.reconnects += 1
                    log.debug("%s: %s; watching again", self.name, err)
                    continue
                self.errors += 1
                if err.gone:
                    log.info("%s: watch expired (410 Gone), listing again", self.name)
                    need_list = True
                    continue
                log.warning("%s: %s; retrying in %.1fs", self.name, err, delay)
                self._stop.wait(delay * (1 + random.random() * 0.2))
                delay = min(30.0, delay * 2)
            except Exception:  # a handler bug must not kill the watch
                log.exception("%s: unexpected error; listing again", self.name)
                need_list = True
                self._stop.wait(delay)
                delay = min(30.0, delay * 2)

    def _list(self) -> None:
        fresh: dict[str, R] = {}
        aside: set[str] = set()
        query = {**self._selectors(), "limit": self.page_size}
        cont = ""
        while True:
            if cont:
                query["continue"] = cont
            page = self.client.list_page(self.path, query, self.binary)
            self._choose_format(page)
            self._read_page(page, fresh, aside)
            meta = page.get("metadata") or {}
            del page  # not kept alive while the next page is fetched and decoded
            cont = meta.get("continue") or ""
            if not cont:
                self.resource_version = meta.get("resourceVersion", "")
                break
        for key in self._set_aside - aside:  # readable now, or gone
            if key in fresh:
                self.unreadable.readable(self.kind, key)
            else:
                self.unreadable.gone(self.kind, key)
        self._set_aside = aside
        self._replace(fresh)
        self.relists += 1
        self.synced.set()

    def _choose_format(self, page: Json) -> None:
        """After the first page: protobuf from then on if the server sent it, else JSON."""
        if self._format_chosen or self.binary is None:
            return
        self._format_chosen = True
        if not isinstance(page, wire_protobuf.FromProtobuf):
            log.info("%s: the API server lists it in JSON, not protobuf: read as JSON",
                     self.name)
            self.binary = None

    def _read_page(self, page: Json, fresh: dict[str, R], aside: set[str]) -> None:
        """Read a list page's items into ``fresh``; the keys of those set aside (or kept
        as stand-ins) into ``aside``."""
        left_out = _left_out(page, "items") if isinstance(page, Decoded) else {}
        api_version = str(page.get("apiVersion") or "")
        kind = str(page.get("kind") or "").removesuffix("List")
        for index, item in enumerate(page.get("items") or ()):
            key, record, unreadable = self._read(item, api_version, kind, left_out.get(index))
            if record is None and self.keep_previous:
                record = self.store.get(key)
            if record is not None:
                fresh[key] = record
            if unreadable:
                aside.add(key)

    def _read(self, obj: object, api_version: str, kind: str,
              problem: tuple[str, str] | None) -> tuple[str, R | None, bool]:
        """(key, record, whether it counts as unreadable) for one object; the record is
        None (or a stand-in) when the object is set aside, which is recorded."""
        if not isinstance(obj, dict):
            log.warning("%s: an item that is not an object was skipped", self.name)
            return "", None, False
        if problem is None:
            try:
                record = self.parse(obj)
            except Exception as err:  # any parser failure sets only this object aside
                problem = (str(getattr(err, "path", "") or ""),
                           f"{type(err).__name__}: {err}"[:300])
            else:
                key = self.key(record)
                error = self.record_error(record) if self.record_error is not None else ""
                if error:
                    self._mark(obj, api_version, kind, key, ("", error))
                return key, record, bool(error)
        key = self.object_key(obj)
        self._mark(obj, api_version, kind, key, problem)
        return key, self._stand_in(obj, problem), True

    def _stand_in(self, obj: Json, problem: tuple[str, str]) -> R | None:
        if self.stand_in is None:
            return None
        field, why = problem
        try:
            return self.stand_in(obj, f"{field}: {why}" if field else why)
        except Exception:
            log.exception("%s: no stand-in for an unreadable object", self.name)
            return None

    def _mark(self, obj: Json, api_version: str, kind: str, key: str,
              problem: tuple[str, str]) -> None:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        ref = ObjectRef(str(obj.get("apiVersion") or api_version),
                        str(obj.get("kind") or kind), str(meta.get("namespace") or ""),
                        str(meta.get("name") or ""), str(meta.get("uid") or ""))
        self.unreadable.set_aside(Unreadable(self.kind, ref,
                                             str(meta.get("resourceVersion") or ""), *problem,
                                             store_key=key))

    def _replace(self, fresh: dict[str, R]) -> None:
        """Swap in a new listing, telling the handler only what changed."""
        old = self.store
        self.store = fresh
        for key, record in old.items():
            if key not in fresh:
                self.handler.on_delete(record)
        for key, record in fresh.items():
            previous = old.get(key)
            if previous is None:
                self.handler.on_add(record)
            elif _version(previous) != _version(record):
                self.handler.on_update(previous, record)

    def _watch(self) -> None:
        query = {
            **self._selectors(),
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": random.randint(240, 300),
        }
        for event in self.client.watch(self.path, query, self.watch_read_timeout,
                                       self.binary):
            if self._stop.is_set():
                return
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                code = int(obj.get("code") or 0)
                raise ApiError(code, obj.get("message", "watch error"), obj)
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if kind == "BOOKMARK":
                if rv:
                    self.resource_version = rv
                continue
            if kind == "ADDED" or kind == "MODIFIED":
                self._changed(obj, _left_out(event, "object").get(None)
                              if isinstance(event, Decoded) else None)
            elif kind == "DELETED":
                self._deleted(obj)
            if rv:
                self.resource_version = rv

    def _changed(self, obj: Json, problem: tuple[str, str] | None) -> None:
        """An object added or modified; one set aside leaves the store (see the module)."""
        key, record, unreadable = self._read(obj, "", "", problem)
        if unreadable:
            self._set_aside.add(key)
        elif key in self._set_aside:
            self._set_aside.discard(key)
            self.unreadable.readable(self.kind, key)
        previous = self.store.get(key)
        if record is None:
            if previous is not None and not self.keep_previous:
                del self.store[key]
                self.handler.on_delete(previous)
            return
        self.store[key] = record
        if previous is None:
            self.handler.on_add(record)
        else:
            self.handler.on_update(previous, record)

    def _deleted(self, obj: Json) -> None:
        try:
            record: R | None = self.parse(obj)
        except Exception:  # its key is all a delete needs
            record = None
        key = self.key(record) if record is not None else self.object_key(obj)
        self._set_aside.discard(key)
        self.unreadable.gone(self.kind, key)  # its Warning's rate limit too, read or not
        previous = self.store.pop(key, None)
        if previous is not None or record is not None:
            self.handler.on_delete(previous if previous is not None else record)  # type: ignore[arg-type]


def _version(record: object) -> str:
    return str(getattr(record, "resource_version", ""))


def wait_synced(informers: list[Informer[Any]], timeout: float | None = None,
                stop: threading.Event | None = None) -> bool:
    """Whether every informer has listed within ``timeout`` (None: however long it takes),
    given up early once ``stop`` is set (a SIGTERM while a watch cannot list: its kind is
    not served, or the API server is gone)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for informer in informers:
        while not informer.synced.is_set():
            if stop is not None and stop.is_set():
                return False
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            informer.synced.wait(SYNC_POLL if remaining is None else min(remaining, SYNC_POLL))
    return True
