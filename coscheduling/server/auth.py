"""Who may call what: loopback detection and per-RPC authorization by client certificate.

Off this machine the server only speaks mutual TLS, so every caller has a certificate the
configured client CA signed; its identities (subject common name and subject alternative
names) are matched against two lists from the configuration: read-only clients may ask
questions, mutating clients may also hold and release room (Reserve, Permit, ...). PreFilter
is mutating here: the gang plugin's PreFilter claims room for a whole gang.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from coscheduling.server.wire import RequestError

READ_ONLY_RPCS = frozenset({"Less", "Filter", "Score", "GetPodGroup", "WatchDecisions",
                            "Simulate"})
MUTATING_RPCS = frozenset({"PreFilter", "Reserve", "Unreserve", "Permit", "PostBind",
                           "Schedule"})
LEADER_ONLY_RPCS = MUTATING_RPCS | {"Simulate"}
"""Calls only the leader answers: those that change state, and the what-if (a standby's
cache has none of the leader's claims or waiting gangs, so its answer would be wrong)."""
ANY_CLIENT = "*"  # any certificate the client CA signed

_IDENTITY_KEYS = ("x509_subject_alternative_name", "x509_common_name")


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
    """The verified names in the caller's certificate (none on a plaintext or TLS-only
    connection: only mutual TLS verifies a client)."""
    auth = context.auth_context() or {}
    return frozenset(value.decode(errors="replace") for key in _IDENTITY_KEYS
                     for value in auth.get(key, ()))


@dataclass(frozen=True)
class Authorizer:
    """Per-RPC authorization; ``enforced`` only under mutual TLS (no identity otherwise)."""

    read_only: frozenset[str]
    mutating: frozenset[str]
    enforced: bool

    @classmethod
    def of(cls, read_only: Iterable[str], mutating: Iterable[str],
           enforced: bool) -> Authorizer:
        return cls(frozenset(read_only), frozenset(mutating), enforced)

    def check(self, rpc: str, context: Any) -> None:
        """Raise PERMISSION_DENIED (or UNAUTHENTICATED) unless the caller may call ``rpc``."""
        if not self.enforced:
            return
        names = caller_identities(context)
        if not names:
            raise RequestError(grpc.StatusCode.UNAUTHENTICATED, "certificate",
                               "the client certificate names no identity (common name or "
                               "subject alternative name)")
        allowed = self.mutating if rpc in MUTATING_RPCS else self.read_only | self.mutating
        if ANY_CLIENT in allowed or names & allowed:
            return
        which = "grpc.mutatingClients" if rpc in MUTATING_RPCS else \
            "grpc.readOnlyClients or grpc.mutatingClients"
        raise RequestError(grpc.StatusCode.PERMISSION_DENIED, "certificate",
                           f"{', '.join(sorted(names))} may not call {rpc}: not in {which}")

    def stream_owner(self, context: Any) -> tuple[str, bool]:
        """Who opens a stream, for the per-caller stream limits: (identity, whether it may
        call mutating RPCs). Without mutual TLS every caller is one anonymous mutating one."""
        if not self.enforced:
            return "", True
        names = caller_identities(context)
        return ",".join(sorted(names)), ANY_CLIENT in self.mutating or bool(names & self.mutating)
