"""The two-writers rule (ballast/model/load_source.py): a writer leaves another source's fresh values alone,
takes over stale or unstamped ones, and never defers to itself."""

from __future__ import annotations

import pytest

from ballast.contract.annotations import CRANE_LOAD_METRICS, format_hot_value, format_load
from ballast.model.load_source import (
    ANNOTATOR_SOURCE,
    LOAD_ANNOTATION_KEYS,
    LOAD_SOURCE_KEY,
    agent_source,
    other_fresh_source,
)
from ballast.model.policy import load_policy
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
