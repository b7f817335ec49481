"""Kubernetes resource quantities (``"500m"``, ``"1.5"``, ``"8Gi"``, ``"1e3"``, ``"129M"``), exactly.

The agent reads quantities from kubelet configuration and NRT objects and must compare ``"4"`` with
``"4000m"`` as the same value, so values are ``Fraction``s, never floats. Formatting follows the API
machinery's canonical form (``resource.Quantity.String()``) so what the agent writes looks like what
``kubectl`` prints.

Grammar (``k8s.io/apimachinery/pkg/api/resource``)::

    <quantity> ::= <sign>? <digits> ( "." <digits>? )? <suffix> | <sign>? "." <digits> <suffix>
    <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei            (binary SI)
                 | n | u | m | "" | k | M | G | T | P | E (decimal SI)
                 | ( e | E ) <sign>? <digits>               (decimal exponent)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

__all__ = [
    "Quantity",
    "QuantityError",
    "format_cpu_milli",
    "format_quantity",
    "parse_bytes",
    "parse_cpu_milli",
    "parse_quantity",
]

Format = Literal["DecimalSI", "BinarySI", "DecimalExponent"]

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXP = {e: s for s, e in _DECIMAL.items()}
_BINARY_BY_EXP = {e: s for s, e in _BINARY.items()}
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)"
)
_MAX_EXPONENT = 100
"""Bound on ``1e<n>``: no resource needs more, and ``1e999999999`` must not become a giant integer."""


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity; the message quotes it."""


@dataclass(frozen=True, eq=False, slots=True)
class Quantity:
    """An exact quantity plus the format it was written in (which decides how it is printed back).

    Equality and hashing are by value: ``Quantity.parse("4") == Quantity.parse("4000m")``.
    """

    value: Fraction
    format: Format = "DecimalSI"

    @classmethod
    def parse(cls, text: str | int | float) -> Quantity:
        value, fmt = _parse(text)
        return cls(value, fmt)

    def __add__(self, other: Quantity) -> Quantity:
        # Like Quantity.Add: the sum keeps the left operand's format.
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.value + other.value, self.format)

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.value - other.value, self.format)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __str__(self) -> str:
        return format_quantity(self.value, self.format)

    def milli(self) -> int:
        """Value in thousandths, rounded up (``MilliValue()``): ``"1.0001"`` -> 1001."""
        return math.ceil(self.value * 1000)

    def ceil(self) -> int:
        """Value rounded up to an integer (``Value()``): bytes, or whole CPUs."""
        return math.ceil(self.value)


def _parse(text: str | int | float) -> tuple[Fraction, Format]:
    if isinstance(text, bool):
        raise QuantityError(f"invalid quantity {text!r}: expected a string like '500m' or '8Gi'")
    if isinstance(text, int):
        return Fraction(text), "DecimalSI"
    if isinstance(text, float):
        # YAML turns `cpu: 0.5` into a float; its shortest repr is the decimal the user wrote.
        if not math.isfinite(text):
            raise QuantityError(f"invalid quantity {text!r}: not a finite number")
        text = repr(text)
    if not isinstance(text, str):
        raise QuantityError(f"invalid quantity {text!r}: expected a string like '500m' or '8Gi'")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(
            f"invalid quantity {text!r}: expected a number with an optional suffix "
            "(m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent like e3)"
        )
    number = Fraction(match.group("number"))
    if match.group("sign") == "-":
        number = -number
    suffix = match.group("suffix")
    if suffix in _BINARY:
        return number * 1024 ** _BINARY[suffix], "BinarySI"
    if suffix in _DECIMAL:
        return number * Fraction(10) ** _DECIMAL[suffix], "DecimalSI"
    exponent = int(suffix[1:])
    if abs(exponent) > _MAX_EXPONENT:
        raise QuantityError(f"invalid quantity {text!r}: exponent {exponent} is out of range")
    return number * Fraction(10) ** exponent, "DecimalExponent"


def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity; ``QuantityError`` (a ``ValueError``) naming the value if invalid."""
    return _parse(text)[0]


def parse_cpu_milli(text: str | int | float) -> int:
    """A CPU quantity in millicores, rounded up like ``MilliValue()``: ``"1.5"`` -> 1500."""
    return math.ceil(_parse(text)[0] * 1000)


def parse_bytes(text: str | int | float) -> int:
    """A memory quantity in bytes, rounded up like ``Value()``: ``"129M"`` -> 129000000."""
    return math.ceil(_parse(text)[0])


def format_cpu_milli(milli: int) -> str:
    """Millicores in canonical form: 1000 -> ``"1"``, 1500 -> ``"1500m"``, 250 -> ``"250m"``."""
    return format_quantity(Fraction(milli, 1000))


def format_quantity(value: Fraction | int, fmt: Format = "DecimalSI") -> str:
    """The canonical string Kubernetes prints for ``value`` in ``fmt`` (``CanonicalizeBytes``).

    DecimalSI: the integer mantissa with the exponent a multiple of 3 (``1500m``, ``1k``, ``129M``).
    BinarySI: the largest exact power-of-1024 suffix (``1536Mi``); values below 1024 or not whole fall
    back to DecimalSI. Values are first rounded up to the nano unit, the finest Kubernetes keeps.
    """
    value = Fraction(value)
    nanos = math.ceil(value * 10**9)
    if fmt == "BinarySI" and abs(value) >= 1024 and value.denominator == 1:
        mantissa, exp = int(value), 0
        while mantissa % 1024 == 0 and mantissa and exp < max(_BINARY_BY_EXP):
            mantissa //= 1024
            exp += 1
        return f"{mantissa}{_BINARY_BY_EXP.get(exp, '')}"
    if nanos == 0:
        return "0"
    mantissa, exp = nanos, -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exp += 1
    shift = exp % 3
    mantissa, exp = mantissa * 10**shift, exp - shift
    if fmt == "DecimalExponent" or exp not in _DECIMAL_BY_EXP:
        return f"{mantissa}e{exp}" if exp else str(mantissa)
    return f"{mantissa}{_DECIMAL_BY_EXP[exp]}"
