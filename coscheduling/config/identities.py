"""Client identities as the configuration names them (``grpc.readOnlyClients``, ...).

An identity is typed: ``DNS:<name>`` or ``URI:<uri>`` (a subject alternative name of that
type) or ``CN:<name>`` (the subject's common name). Email, IP and other SAN types never
authorize a client: they name a mailbox or an address, and a CA that issues them for other
purposes must not thereby grant access. A name without a type (the older form,
``coscheduling-driver``) matches the common name (what deploy/issue-certs.sh issues) or a DNS
SAN of that name, never another type.
"""

from __future__ import annotations

ANY_CLIENT = "*"  # any certificate the client CA signed
IDENTITY_TYPES = ("DNS", "URI", "CN")
UNTYPED_AS = ("CN", "DNS")


def identity_forms(configured: str) -> frozenset[str]:
    """The typed names (``DNS:x``) a configured identity matches; ValueError saying why for
    a type that never authorizes or is unknown."""
    if configured == ANY_CLIENT:
        return frozenset({ANY_CLIENT})
    kind, colon, value = configured.partition(":")
    if not colon or "/" in kind or "." in kind:  # no type: a DNS name or a common name
        return frozenset(f"{t}:{configured}" for t in UNTYPED_AS)
    if kind.upper() in IDENTITY_TYPES and value.strip():
        return frozenset({f"{kind.upper()}:{value}"})
    raise ValueError(f"{configured!r} is not an identity: write DNS:<name>, URI:<uri> or "
                     f"CN:<name> (a name without a type matches a common name or a DNS SAN); "
                     f"{kind!r} names never authorize a client")
