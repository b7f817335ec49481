"""Patch planning: one patch per node with news, nothing for unchanged fresh values, refresh before expiry."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from ballast.annotator.plan import PatchPlanner
from ballast.contract.annotations import HOT_VALUE_KEY, format_hot_value, format_load, read_sample

NOW = 1_800_000_000.0
CPU, MEM_1H = "cpu_usage_avg_5m", "mem_usage_max_avg_1h"
PERIODS = {CPU: 180.0, MEM_1H: 900.0}


def planner(**kw) -> PatchPlanner:
    return PatchPlanner({m: p + 300 for m, p in PERIODS.items()}, PERIODS, 60.0, **kw)


def test_new_node_gets_everything_in_one_patch() -> None:
    p = planner().plan("n1", {}, {CPU: 0.35, MEM_1H: 0.5}, 3, NOW)
    assert p is not None
    assert p.annotations == {
        CPU: "0.35000," + format_load(0, NOW).split(",")[1],
        MEM_1H: format_load(0.5, NOW),
        HOT_VALUE_KEY: format_hot_value(3, NOW),
    }
    assert set(p.changed) == {CPU, MEM_1H, HOT_VALUE_KEY}
    assert p.body() == {"metadata": {"annotations": p.annotations}}


def test_unchanged_fresh_values_are_skipped() -> None:
    current = {CPU: format_load(0.35, NOW - 60), MEM_1H: format_load(0.5, NOW - 60)}
    assert planner().plan("n1", current, {CPU: 0.350001, MEM_1H: 0.5}, 0, NOW) is None


def test_a_changed_value_carries_every_synced_value() -> None:
    current = {CPU: format_load(0.35, NOW - 60), MEM_1H: format_load(0.5, NOW - 60)}
    p = planner().plan("n1", current, {CPU: 0.36, MEM_1H: 0.5}, None, NOW)
    assert p is not None and p.changed == (CPU,)
    assert p.annotations == {CPU: format_load(0.36, NOW), MEM_1H: format_load(0.5, NOW)}
    assert HOT_VALUE_KEY not in p.annotations  # no hot-value windows in the policy: never touched


def test_unchanged_value_is_refreshed_before_it_would_expire() -> None:
    # Valid for 180 + 300 s; next sync in 180 s; margin 30 s: refresh once older than 300 - 30 = 270 s.
    fresh = {CPU: format_load(0.35, NOW - 269)}
    assert planner().plan("n1", fresh, {CPU: 0.35}, None, NOW) is None
    aging = {CPU: format_load(0.35, NOW - 270)}
    p = planner().plan("n1", aging, {CPU: 0.35}, None, NOW)
    assert p is not None and p.changed == () and p.annotations == {CPU: format_load(0.35, NOW)}
    # The refreshed value outlives the next sync: timestamp + valid_for > next sync + margin.
    sample, _ = read_sample(p.annotations[CPU], NOW)
    assert sample is not None and sample.timestamp + 480 > NOW + 180 + 30


def test_metrics_not_synced_this_cycle_are_left_alone() -> None:
    current = {CPU: format_load(0.35, NOW - 60), MEM_1H: "garbage"}
    assert planner().plan("n1", current, {CPU: 0.35}, None, NOW) is None


def test_unreadable_or_legacy_stamp_is_rewritten() -> None:
    legacy = {CPU: "0.35000,2027-01-15T16:00:00Z"}  # crane: local time with a literal Z
    p = planner().plan("n1", legacy, {CPU: 0.35}, None, NOW)
    assert p is not None and p.changed == ()  # same value, but the stamp must be renewed
    # With the legacy zone known and the stamp recent, the value is understood and kept.
    shanghai = ZoneInfo("Asia/Shanghai")
    recent = {CPU: "0.35000," + _local(NOW - 60, shanghai)}
    assert planner(legacy_zone=shanghai).plan("n1", recent, {CPU: 0.35}, None, NOW) is None


def _local(when: float, zone: ZoneInfo) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(when, tz=zone).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_hot_value_rules() -> None:
    pl = planner()
    # zero and nothing there: nothing to say
    assert pl.plan("n1", {}, {}, 0, NOW) is None
    # a fresh non-zero value dropping to zero must be written
    p = pl.plan("n1", {HOT_VALUE_KEY: format_hot_value(2, NOW - 30)}, {}, 0, NOW)
    assert p is not None and p.annotations == {HOT_VALUE_KEY: format_hot_value(0, NOW)}
    # an expired value already reads as zero
    assert pl.plan("n1", {HOT_VALUE_KEY: format_hot_value(2, NOW - 301)}, {}, 0, NOW) is None
    # unchanged, fresh: skipped; about to expire before the next refresh (60 s + 30 s margin): rewritten
    assert pl.plan("n1", {HOT_VALUE_KEY: format_hot_value(2, NOW - 200)}, {}, 2, NOW) is None
    p = pl.plan("n1", {HOT_VALUE_KEY: format_hot_value(2, NOW - 210)}, {}, 2, NOW)
    assert p is not None and p.changed == ()
    # an expired value with the same number is news again (it read as 0)
    p = pl.plan("n1", {HOT_VALUE_KEY: format_hot_value(2, NOW - 400)}, {}, 2, NOW)
    assert p is not None and p.changed == (HOT_VALUE_KEY,)


def test_a_hot_value_the_extender_refuses_is_rewritten() -> None:
    """The hot value is read as the extender reads it (the one strict reader): stamped an hour ahead, it is no
    information there, so the same count is news and is written with a true stamp (it was left alone, and
    the node's burst went uncounted until the clock caught up)."""
    ahead = {HOT_VALUE_KEY: format_hot_value(2, NOW + 3600)}
    p = planner().plan("n1", ahead, {}, 2, NOW)
    assert p is not None and p.changed == (HOT_VALUE_KEY,)
    assert p.annotations == {HOT_VALUE_KEY: format_hot_value(2, NOW)}


def test_hot_value_rides_along_when_non_zero() -> None:
    current = {HOT_VALUE_KEY: format_hot_value(1, NOW - 10)}
    p = planner().plan("n1", current, {CPU: 0.5}, 1, NOW)
    assert p is not None and p.changed == (CPU,)
    assert p.annotations[HOT_VALUE_KEY] == format_hot_value(1, NOW)
    p = planner().plan("n1", {}, {CPU: 0.5}, 0, NOW)
    assert p is not None and HOT_VALUE_KEY not in p.annotations
