"""The two-writers rule (ballast/model/load_source.py): a writer leaves another source's fresh values alone,
takes over stale or unstamped ones, and never defers to itself."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from ballast.contract.annotations import (
    CRANE_LOAD_METRICS,
    HOT_VALUE_KEY,
    HOT_VALUE_VALID_SECONDS,
    format_hot_value,
    format_load,
    fresh,
)
from ballast.model.load_source import (
    ANNOTATOR_SOURCE,
    LOAD_ANNOTATION_KEYS,
    LOAD_SOURCE_KEY,
    agent_source,
    other_fresh_source,
)
from ballast.model.nodestate import parse_node
from ballast.model.policy import Policy, load_policy
from ballast.testing.parts import POLICY_FILE

POLICY = load_policy(POLICY_FILE)
NOW = 1_764_100_800.0
AGENT = agent_source("node-a")


def test_the_stamps() -> None:
    assert AGENT == "agent/node-a" and ANNOTATOR_SOURCE == "annotator"
    assert LOAD_SOURCE_KEY in LOAD_ANNOTATION_KEYS and "node_hot_value" in LOAD_ANNOTATION_KEYS


def test_the_shipped_policy_names_only_measured_metrics() -> None:
    """What the shipped policy syncs is what a load source writes (so the admission policy's key list, which
    is LOAD_ANNOTATION_KEYS, admits every write the shipped install makes)."""
    assert set(POLICY.sync_periods) <= set(CRANE_LOAD_METRICS)


@pytest.mark.parametrize(
    ("notes", "me", "expected"),
    [
        # the agent's fresh 5-minute mean: the annotator leaves the node
        ({LOAD_SOURCE_KEY: AGENT, "cpu_usage_avg_5m": format_load(0.4, NOW - 60)}, ANNOTATOR_SOURCE, AGENT),
        # ... and the agent never defers to its own stamp
        ({LOAD_SOURCE_KEY: AGENT, "cpu_usage_avg_5m": format_load(0.4, NOW - 60)}, AGENT, None),
        # a fresh hot value alone is still someone writing
        ({LOAD_SOURCE_KEY: AGENT, "node_hot_value": format_hot_value(2, NOW - 60)}, ANNOTATOR_SOURCE, AGENT),
        # everything stale: the other writer stopped, take over
        (
            {
                LOAD_SOURCE_KEY: AGENT,
                "cpu_usage_avg_5m": format_load(0.4, NOW - 3 * 3600),
                "node_hot_value": format_hot_value(2, NOW - 600),
            },
            ANNOTATOR_SOURCE,
            None,
        ),
        # no stamp (crane's annotator, an older Ballast): replaced
        ({"cpu_usage_avg_5m": format_load(0.4, NOW - 60)}, ANNOTATOR_SOURCE, None),
        # a stamp and nothing readable beside it
        ({LOAD_SOURCE_KEY: AGENT, "cpu_usage_avg_5m": "garbage"}, ANNOTATOR_SOURCE, None),
        # the annotator's fresh values stop the agent
        (
            {LOAD_SOURCE_KEY: ANNOTATOR_SOURCE, "mem_usage_avg_5m": format_load(0.4, NOW - 10)},
            AGENT,
            ANNOTATOR_SOURCE,
        ),
        # a stamp that is not a string is no stamp
        ({LOAD_SOURCE_KEY: 7, "cpu_usage_avg_5m": format_load(0.4, NOW - 60)}, ANNOTATOR_SOURCE, None),
    ],
)
def test_other_fresh_source(notes: dict[str, object], me: str, expected: str | None) -> None:
    assert other_fresh_source(notes, me, POLICY, NOW) == expected


NEW_YORK, SHANGHAI = ZoneInfo("America/New_York"), ZoneInfo("Asia/Shanghai")


def _crane_local(when: float, zone: ZoneInfo) -> str:
    """crane's legacy stamp: the zone's wall clock followed by a literal Z."""
    return datetime.fromtimestamp(when, tz=zone).strftime("%Y-%m-%dT%H:%M:%SZ")


def _in_zone(zone: ZoneInfo) -> Policy:
    return dataclasses.replace(POLICY, legacy_zone=zone)


@pytest.mark.parametrize(
    ("value", "policy", "expected"),
    [
        # above the sane cap (1000 %): a broken writer, no information to the extender, nobody's fresh value
        ("50.00000," + format_load(0, NOW - 60).split(",")[1], POLICY, None),
        # stamped an hour ahead: the extender refuses it; it must not keep a node from its own agent forever
        (format_load(0.4, NOW + 3600), POLICY, None),
        # crane's legacy stamp, 60 s old in New York's wall clock: fresh when read in the policy's zone
        ("0.40000," + _crane_local(NOW - 60, NEW_YORK), _in_zone(NEW_YORK), AGENT),
        # ... and two hours old in Shanghai's: stale in the policy's zone (read as UTC it was 6 h ahead)
        ("0.40000," + _crane_local(NOW - 7200, SHANGHAI), _in_zone(SHANGHAI), None),
    ],
    ids=["above-cap", "ahead", "legacy-new-york-fresh", "legacy-shanghai-stale"],
)
def test_fresh_means_what_the_extender_reads(value: str, policy: Policy, expected: str | None) -> None:
    """The other writer's values are read as the extender reads them (one strict reader, the policy's legacy
    zone): each case here was judged fresh, or stale, against the extender's reading before."""
    notes = {LOAD_SOURCE_KEY: AGENT, "cpu_usage_avg_5m": value}
    assert other_fresh_source(notes, ANNOTATOR_SOURCE, policy, NOW) == expected


VALUES = [
    format_load(0.4, NOW - 60),
    format_load(0.4, NOW - 3 * 3600),
    format_load(0.4, NOW + 200),
    format_load(0.4, NOW + 400),
    format_load(10.0, NOW - 60),
    format_load(10.5, NOW - 60),
    "-0.1," + format_load(0, NOW - 60).split(",")[1],
    "0.4," + _crane_local(NOW - 60, SHANGHAI),
    "0.4," + _crane_local(NOW - 60, NEW_YORK),
    "0.4,2026-11-22T07:00:00",
    "garbage",
]
HOT_VALUES = [
    format_hot_value(2, NOW - 60),
    format_hot_value(2, NOW - 400),
    format_hot_value(2, NOW + 3600),
    format_hot_value(20_000, NOW - 60),
]


@pytest.mark.parametrize("policy", [POLICY, _in_zone(SHANGHAI), _in_zone(NEW_YORK)], ids=["utc", "sh", "ny"])
@pytest.mark.parametrize("key", ["cpu_usage_avg_5m", HOT_VALUE_KEY])
def test_the_writers_and_the_extender_judge_a_value_alike(policy: Policy, key: str) -> None:
    """Whatever an annotation says, "another writer's fresh value" means "a value the extender counts"."""
    valid = HOT_VALUE_VALID_SECONDS if key == HOT_VALUE_KEY else policy.valid_for(key)
    for value in HOT_VALUES if key == HOT_VALUE_KEY else VALUES:
        notes = {LOAD_SOURCE_KEY: AGENT, key: value}
        load = parse_node({"metadata": {"name": "n", "annotations": notes}}, policy, NOW)
        sample = load.hot if key == HOT_VALUE_KEY else load.samples.get(key)
        counts = fresh(sample, valid, NOW) is not None
        assert other_fresh_source(notes, ANNOTATOR_SOURCE, policy, NOW) == (AGENT if counts else None), value
