"""Kubernetes resource quantities (``500m``, ``8Gi``, ``1e3``) as exact fractions.

Exact arithmetic matters: ``"4"`` and ``"4000m"`` must compare equal, and a sum of millicores must not
drift the way floats do. Values are parsed once, when an object arrives, never per request.
"""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIX = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity string (or a plain number) exactly; ``ValueError`` names the bad value."""
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}: expected a string like '500m' or '2Gi'")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    if not isinstance(value, str):
        raise ValueError(f"invalid quantity {value!r}: expected a string like '500m' or '2Gi'")
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(
            f"invalid quantity {value!r}: expected a number with an optional suffix like m, Mi, Gi"
        )
    number, exponent, suffix = match.groups()
    result = Fraction(number)
    if exponent:
        result *= Fraction(10) ** int(exponent[1:])
    else:
        result *= _SUFFIX[suffix or ""]
    return result


def cpu_milli(value: object) -> int:
    """CPU quantity in millicores, rounded up as the API server rounds (``0.1m`` -> 1m)."""
    q = parse_quantity(value) * 1000
    return int(-(-q.numerator // q.denominator))


def memory_bytes(value: object) -> int:
    """Memory quantity in bytes, rounded up."""
    q = parse_quantity(value)
    return int(-(-q.numerator // q.denominator))


def format_cpu(milli: int) -> str:
    """Canonical CPU string: whole cores as ``"4"``, otherwise millicores ``"1500m"``."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
