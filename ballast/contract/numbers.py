"""Numbers from input Ballast does not control (annotations, request bodies, policy files), read totally.

Python's ints have no size limit, so a JSON or YAML number can be anything: ``math.isfinite(10**400)``
raises ``OverflowError``, ``float(10**400)`` too, and ``repr`` of an int of more than 4300 digits raises
``ValueError``. A reader that meets such a value must say "bad" with a short reason, never raise, so these
two helpers are what every check of an untrusted number goes through.
"""

from __future__ import annotations

import math

__all__ = ["finite", "shown"]


def finite(value: object) -> float | None:
    """``value`` as a finite float, or ``None`` for anything else: not a number (bools included), NaN,
    an infinity, or an int too large for a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def shown(value: object, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters for a message; never raises (an int of 310 digits reads
    ``10000000000000000000000000000000000000…`` and one of 5000, whose repr Python refuses, ``an integer
    of about 5000 digits``)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 14000:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    try:
        text = repr(value)
    except Exception:  # a repr that fails (recursion, a huge int): the type is all we can say
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 1] + "…"
