"""UnsupportedFields: refuse, out loud, pods whose placement needs what is not built."""

from coscheduling.plugins.unsupported.plugin import NAME, UnsupportedFields, refusal

__all__ = ["NAME", "UnsupportedFields", "refusal"]
