"""Go-style durations (``3m``, ``1h30m``, ``1.5s``), the syntax crane's policy file and kube configs use.

Kept separate from the policy model so that the annotator, the extender and the CLI flags parse
durations one way.
"""

from __future__ import annotations

import re

_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
MAX_SECONDS = (2**63 - 1) / 1e9
"""Go's ``time.Duration`` holds at most this many seconds; ``ParseDuration`` refuses longer ones."""
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Return the duration in seconds, or raise ``ValueError`` saying what is wrong.

    Accepts exactly Go's ``time.ParseDuration`` syntax for non-negative values (``"0"``, ``"300ms"``,
    ``"2h45m"``). Days are not a Go unit and are refused, because crane would refuse them too.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a duration string like '3m', got {text!r}")
    s = text.strip()
    if s in ("0", "+0"):
        return 0.0
    if s.startswith("+"):
        s = s[1:]
    if s.startswith("-"):
        raise ValueError(f"duration {text!r} is negative")
    if not s:
        raise ValueError("empty duration; use a value like '3m' or '1h30m'")
    pos = 0
    total = 0.0
    for match in _PART.finditer(s):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(s):
        raise ValueError(
            f"invalid duration {text[:40]!r}: use a number with a unit ns, us, ms, s, m or h "
            "(e.g. '3m', '1h30m')"
        )
    if not total <= MAX_SECONDS:  # also NaN and inf: "9" * 400 + "h" reads as inf
        raise ValueError(f"duration {text[:40]!r} is out of range: at most about 292 years (Go's limit)")
    return total


def format_duration(seconds: float) -> str:
    """Render seconds the compact way people read them in logs and reasons: ``1h2m3s``, ``45s``, ``250ms``."""
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    out = ""
    if hours:
        out += f"{hours}h"
    if minutes:
        out += f"{minutes}m"
    if secs or not out:
        out += f"{secs}s"
    return out
