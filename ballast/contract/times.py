"""RFC 3339 timestamps as Ballast writes and reads them: one formatter and one total parser, so the load
annotations, the NodeLoad status, a pod's bind time (``ballast.contract.pod.bound_at``) and the rebalancer's
Events and views cannot disagree on the form.

Ballast writes UTC at second precision (``2026-11-22T07:00:00Z``). It reads any offset, ``Z`` or ``z``, and
fractions; a time without an offset is ambiguous and reads as ``None``, as does anything that is not a time.
"""

from __future__ import annotations

from datetime import UTC, datetime


def format_rfc3339(when: float) -> str:
    """Unix seconds as RFC 3339 UTC at second precision: ``2026-11-22T07:00:00Z``."""
    return datetime.fromtimestamp(int(when), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: object) -> float | None:
    """An RFC 3339 time with an offset as Unix seconds; ``None`` for anything else. Never raises."""
    if not isinstance(text, str) or not text:
        return None
    if text[-1] in "zZ":
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
        return parsed.timestamp() if parsed.tzinfo is not None else None
    except (ValueError, OverflowError, OSError):
        return None
