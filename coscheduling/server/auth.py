"""Who may call what: loopback detection and per-RPC authorization by client certificate.

Off this machine the server only speaks mutual TLS, so every caller has a certificate the
configured client CA signed; its typed identities (``DNS:`` and ``URI:`` subject alternative
names, ``CN:`` the subject's common name) are matched against two lists from the
configuration: read-only clients may ask questions, mutating clients may also hold and
release room (Reserve, Permit, ...). PreFilter is mutating here: the gang plugin's PreFilter
claims room for a whole gang. Each identity may be limited to namespaces (its reach).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from coscheduling.config.identities import ANY_CLIENT, identity_forms
from coscheduling.server.convert import RequestError

READ_ONLY_RPCS = frozenset({"Less", "Filter", "Score", "GetPodGroup", "WatchDecisions",
                            "Simulate"})
MUTATING_RPCS = frozenset({"PreFilter", "Reserve", "Unreserve", "Permit", "PostBind",
                           "Schedule"})
LEADER_ONLY_RPCS = MUTATING_RPCS | {"Simulate"}
"""Calls only the leader answers: those that change state, and the what-if (a standby's
cache has none of the leader's claims or waiting gangs, so its answer would be wrong)."""
_AUTH_KEYS = {"DNS": "peer_dns", "URI": "peer_uri", "CN": "x509_common_name"}
"""Where grpc's auth context puts each identity type (configuration: config/identities.py)."""


UNIX_PREFIX = "unix:"


def is_local(address: str) -> bool:
    """Whether only this machine can connect: a loopback address, or a Unix socket (which
    the server makes readable by its own user only)."""
    return address.startswith(UNIX_PREFIX) or is_loopback(address)


def is_loopback(address: str) -> bool:
    """True when ``host:port`` listens on this machine only (127.0.0.0/8, ::1, localhost)."""
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "", 0.0.0.0's spellings, or a host name that may resolve anywhere


def caller_identities(context: Any) -> frozenset[str]:
    """The verified typed names in the caller's certificate (``DNS:x``, ``URI:x``, ``CN:x``;
    none on a plaintext or TLS-only connection: only mutual TLS verifies a client)."""
    auth = context.auth_context() or {}
    return frozenset(f"{kind}:{value.decode(errors='replace')}"
                     for kind, key in _AUTH_KEYS.items() for value in auth.get(key, ()))


@dataclass(frozen=True)
class Caller:
    """Who made a call, as far as the server acts on it: ``identity`` owns what it reserves
    ("" without mutual TLS: every caller is the same one), ``namespaces`` is its reach
    (None: every namespace)."""

    identity: str
    namespaces: frozenset[str] | None

    def may_act_in(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    def check_namespace(self, namespace: str, field: str) -> None:
        """PERMISSION_DENIED naming the namespace unless it is within reach."""
        if not self.may_act_in(namespace):
            reach = ", ".join(sorted(self.namespaces or ()))
            raise RequestError(grpc.StatusCode.PERMISSION_DENIED, field,
                               f"{self.identity} may not act in namespace {namespace!r} "
                               f"(grpc.clientNamespaces gives it: {reach})")


ANONYMOUS = Caller("", None)


@dataclass(frozen=True)
class Authorizer:
    """Per-RPC authorization; ``enforced`` only under mutual TLS (no identity otherwise).

    ``read_only`` and ``mutating`` hold the typed names the configured identities match;
    ``reach`` maps a typed name to the namespaces its identity may act in (absent: all).
    """

    read_only: frozenset[str]
    mutating: frozenset[str]
    enforced: bool
    reach: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, read_only: Iterable[str], mutating: Iterable[str], enforced: bool,
           namespaces: Mapping[str, Iterable[str]] | None = None) -> Authorizer:
        """From configured identities (typed or not); ``namespaces``: configured identity
        -> the namespaces it may act in."""
        reach = {form: frozenset(spaces) for configured, spaces in (namespaces or {}).items()
                 for form in identity_forms(configured)}
        return cls(_forms(read_only), _forms(mutating), enforced, reach)

    def check(self, rpc: str, context: Any) -> None:
        """Raise PERMISSION_DENIED (or UNAUTHENTICATED) unless the caller may call ``rpc``."""
        self.caller(rpc, context)

    def caller(self, rpc: str, context: Any) -> Caller:
        """The caller of ``rpc`` with its reach; PERMISSION_DENIED (or UNAUTHENTICATED)
        unless it may call ``rpc``."""
        if not self.enforced:
            return ANONYMOUS
        names = caller_identities(context)
        if not names:
            raise RequestError(grpc.StatusCode.UNAUTHENTICATED, "certificate",
                               "the client certificate names no DNS or URI subject "
                               "alternative name and no common name")
        allowed = self.mutating if rpc in MUTATING_RPCS else self.read_only | self.mutating
        granted = names & allowed | ({ANY_CLIENT} & allowed)  # '*' may have a reach too
        identity = ",".join(sorted(names))
        if granted:
            return Caller(identity, self._reach(granted))
        which = "grpc.mutatingClients" if rpc in MUTATING_RPCS else \
            "grpc.readOnlyClients or grpc.mutatingClients"
        raise RequestError(grpc.StatusCode.PERMISSION_DENIED, "certificate",
                           f"{identity} may not call {rpc}: not in {which}")

    def _reach(self, granted: frozenset[str]) -> frozenset[str] | None:
        """The namespaces the granting names reach together (None: one reaches all)."""
        spaces: set[str] = set()
        for name in granted:
            limited = self.reach.get(name)
            if limited is None:
                return None
            spaces |= limited
        return frozenset(spaces)

    def stream_owner(self, context: Any) -> tuple[str, bool]:
        """Who opens a stream, for the per-caller stream limits: (identity, whether it may
        call mutating RPCs). Without mutual TLS every caller is one anonymous mutating one."""
        if not self.enforced:
            return "", True
        names = caller_identities(context)
        return ",".join(sorted(names)), ANY_CLIENT in self.mutating or bool(names & self.mutating)


def _forms(configured: Iterable[str]) -> frozenset[str]:
    return frozenset(form for name in configured for form in identity_forms(name))
