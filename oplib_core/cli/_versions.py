"""``oplib --version``: the installed oplib distributions and their versions."""

from __future__ import annotations

from importlib import metadata

__all__ = ["installed"]


def _is_oplib(dist: metadata.Distribution) -> bool:
    name = (dist.metadata["Name"] or "").lower().replace("_", "-")
    if name.startswith("oplib"):
        return True
    return any(ep.group == "oplib" for ep in dist.entry_points)


def installed() -> list[tuple[str, str]]:
    """``(name, version)`` of every installed distribution that is oplib's or plugs into
    it (an entry point in group ``oplib``), sorted by name, each once."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        if _is_oplib(dist):
            found.setdefault(dist.metadata["Name"], dist.version)
    return sorted(found.items(), key=lambda kv: kv[0].lower())
