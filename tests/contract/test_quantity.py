"""Kubernetes quantities: exact parsing, the errors, and the canonical form Kubernetes prints."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ballast.contract.quantity import (
    Quantity,
    QuantityError,
    format_cpu_milli,
    format_quantity,
    parse_bytes,
    parse_cpu_milli,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Fraction(1)),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("8Gi", Fraction(8 * 2**30)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("1e-3", Fraction(1, 1000)),
        ("128974848", Fraction(128974848)),
        ("129M", Fraction(129_000_000)),
        ("123Mi", Fraction(123 * 2**20)),
        ("1k", Fraction(1000)),
        ("2E", Fraction(2 * 10**18)),
        ("1Ei", Fraction(2**60)),
        ("100u", Fraction(1, 10**4)),
        ("5n", Fraction(5, 10**9)),
        (".5", Fraction(1, 2)),
        ("1.", Fraction(1)),
        ("+2", Fraction(2)),
        ("-2", Fraction(-2)),
        ("0", Fraction(0)),
        (4, Fraction(4)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_parse_exact(text: str | int | float, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "expected a number"),
        ("abc", "expected a number"),
        ("1.2.3", "expected a number"),
        ("1 Gi", "expected a number"),
        (" 1", "expected a number"),
        ("1gi", "expected a number"),
        ("1KiB", "expected a number"),
        ("1e", "expected a number"),
        ("e3", "expected a number"),
        (".", "expected a number"),
        ("\u0663", "expected a number"),
        ("1e999999999", "exponent 999999999 is out of range"),
        (True, "expected a string"),
        (None, "expected a string"),
        (float("nan"), "not a finite number"),
    ],
)
def test_invalid_quantities_name_the_value(text: object, why: str) -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity(text)  # type: ignore[arg-type]
    assert isinstance(err.value, ValueError)
    assert repr(text) in str(err.value)
    assert why in str(err.value)


def test_milli_and_bytes_round_up_like_kubernetes() -> None:
    assert parse_cpu_milli("1.5") == 1500
    assert parse_cpu_milli("100m") == 100
    assert parse_cpu_milli("0.0001") == 1
    assert parse_cpu_milli(2) == 2000
    assert parse_bytes("8Gi") == 8589934592
    assert parse_bytes("129M") == 129000000
    assert parse_bytes("1500m") == 2


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("1500m", "1500m"),
        ("1.5", "1500m"),
        ("0.1", "100m"),
        ("1000", "1k"),
        ("4000m", "4"),
        ("128974848", "128974848"),
        ("129M", "129M"),
        ("129e6", "129e6"),
        ("1.5e3", "1500"),
        ("1e3", "1e3"),
        ("8Gi", "8Gi"),
        ("1536Mi", "1536Mi"),
        ("1024", "1024"),
        ("1Ki", "1Ki"),
        ("512Ki", "512Ki"),
        ("0.5Ki", "512"),
        ("1.5Ki", "1536"),
        ("100u", "100u"),
        ("0", "0"),
        ("0Gi", "0"),
        ("-1500m", "-1500m"),
    ],
)
def test_canonical_form(text: str, canonical: str) -> None:
    assert str(Quantity.parse(text)) == canonical


def test_format_helpers() -> None:
    assert format_cpu_milli(1000) == "1"
    assert format_cpu_milli(1500) == "1500m"
    assert format_cpu_milli(250) == "250m"
    assert format_quantity(Fraction(1, 3)) == "333333334n"  # rounded up to the nano unit
    assert format_quantity(2**70, "BinarySI") == "1024Ei"


def test_quantity_compares_by_value_and_adds_in_the_left_format() -> None:
    assert Quantity.parse("4") == Quantity.parse("4000m")
    assert hash(Quantity.parse("1Ki")) == hash(Quantity.parse("1024"))
    assert Quantity.parse("1Gi") != Quantity.parse("1G")
    total = Quantity.parse("1Gi") + Quantity.parse("512Mi")
    assert str(total) == "1536Mi"
    assert str(Quantity.parse("1") + Quantity.parse("500m")) == "1500m"
    assert str(Quantity.parse("2") - Quantity.parse("500m")) == "1500m"
    assert Quantity.parse("1.0001").milli() == 1001
    assert Quantity.parse("1500m").ceil() == 2


decimal_texts = st.builds(
    lambda whole, frac, suffix: f"{whole}{'.' + frac if frac else ''}{suffix}",
    st.integers(min_value=0, max_value=10**6),
    st.text(alphabet="0123456789", max_size=3),
    st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e2", "e-1"]),
)


@given(decimal_texts)
def test_canonical_form_parses_back_to_the_same_value(text: str) -> None:
    q = Quantity.parse(text)
    assert parse_quantity(str(q)) == q.value
