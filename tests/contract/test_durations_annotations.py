from __future__ import annotations

import math
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from ballast.contract.annotations import format_hot_value, format_load, fresh, parse_timestamp, read_sample
from ballast.contract.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("3m", 180),
        ("15m", 900),
        ("3h", 10800),
        ("1h30m", 5400),
        ("1.5s", 1.5),
        ("300ms", 0.3),
        ("0", 0),
        ("2h45m10s", 9910),
        ("15m0s", 900),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "3", "3 m", "-5m", "1d", "m", "3mm", "five minutes"])
def test_parse_duration_errors(text: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_duration(text)
    assert repr(text.strip()) in str(exc.value) or "empty" in str(exc.value) or "negative" in str(exc.value)


def test_format_duration() -> None:
    assert format_duration(72) == "1m12s"
    assert format_duration(3723) == "1h2m3s"
    assert format_duration(0.25) == "250ms"
    assert format_duration(0) == "0ms"


UTC_STAMP = datetime(2026, 11, 22, 7, 0, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-22T07:00:00Z",
        "2026-11-22T07:00:00+00:00",
        "2026-11-22T15:00:00+08:00",
        "2026-11-22T02:00:00-05:00",
        "2026-11-22T07:00:00.000Z",
        "2026-11-22t07:00:00z",
    ],
)
def test_rfc3339_any_offset(text: str) -> None:
    assert parse_timestamp(text) == UTC_STAMP


def test_legacy_form_read_in_policy_zone() -> None:
    shanghai = ZoneInfo("Asia/Shanghai")
    # crane wrote Shanghai wall-clock time followed by a literal Z
    assert parse_timestamp("2026-11-22T15:00:00Z", shanghai) == UTC_STAMP
    # explicit offsets are never reinterpreted
    assert parse_timestamp("2026-11-22T07:00:00+00:00", shanghai) == UTC_STAMP
    # without a legacy zone, Z means UTC
    assert parse_timestamp("2026-11-22T15:00:00Z") == UTC_STAMP + 8 * 3600


@pytest.mark.parametrize(
    "text", ["", "yesterday", "2026-11-22 07:00:00", "2026-11-22T07:00:00", "2026-13-40T00:00:00Z"]
)
def test_unreadable_timestamps_are_no_information(text: str) -> None:
    assert parse_timestamp(text) is None


@pytest.mark.parametrize(
    "raw",
    [
        None,
        5,
        "",
        "0.5",
        "abc,2026-11-22T07:00:00Z",
        "NaN,2026-11-22T07:00:00Z",
        "nan,2026-11-22T07:00:00Z",
        "inf,2026-11-22T07:00:00Z",
        "-0.1,2026-11-22T07:00:00Z",
        "0.5,garbage",
        "0.5,",
    ],
)
def test_malformed_samples_are_none(raw: object) -> None:
    for strict in (True, False):
        assert read_sample(raw, UTC_STAMP, strict=strict)[0] is None


def test_sample_roundtrip_and_freshness() -> None:
    raw = format_load(0.352104, UTC_STAMP)
    assert raw == "0.35210,2026-11-22T07:00:00Z"
    s, _ = read_sample(raw, UTC_STAMP)
    assert s is not None and math.isclose(s.value, 0.3521)
    assert s.is_fresh(UTC_STAMP + 479, 480)
    assert not s.is_fresh(UTC_STAMP + 480, 480)
    for now in (
        UTC_STAMP + 479,
        UTC_STAMP + 479.999,
        UTC_STAMP + 480,
        UTC_STAMP + 481,
    ):  # one rule, two spellings
        assert (fresh(s, 480, now) is s) is s.is_fresh(now, 480)
    assert fresh(None, 480, UTC_STAMP) is None
    assert format_hot_value(3, UTC_STAMP) == "3,2026-11-22T07:00:00Z"


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("10.5,2026-11-22T07:00:00Z", "above the sane maximum"),
        ("0.5,2026-11-22T07:05:01Z", "in the future"),
    ],
)
def test_strictness_is_the_one_parameter(raw: str, why: str) -> None:
    """One reader: strict (the default, whoever decides whether a value counts) refuses a value above the cap
    and a stamp further ahead than the allowed skew; ``strict=False`` reads the same text as written."""
    sample, reason = read_sample(raw, UTC_STAMP, cap=10.0)
    assert sample is None and reason is not None and why in reason
    loose, reason = read_sample(raw, UTC_STAMP, cap=10.0, strict=False)
    assert loose is not None and reason is None
