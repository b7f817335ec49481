"""Who wrote a node's load annotations, and when a writer must leave them alone.

Two programs can write the same node's load: the agent on that node (from the kernel) and the annotator
(from Prometheus). If both wrote, the values would alternate between two measurements every few seconds and
nobody would see why. So each writer stamps its identity in ``ballast.io/load-source`` with the values, and a
writer that finds another source's *fresh* values leaves the node to it. Stale values (the other writer
stopped) are taken over; values without a stamp (crane-scheduler's own annotator, an older Ballast) are
replaced, which is what migrating from them means.

The agent (``ballast/agent/``) imports this module too, so the key, the identities and the rule are one thing.
"""

from __future__ import annotations

from collections.abc import Mapping

from ballast.contract.annotations import (
    CRANE_LOAD_METRICS,
    HOT_VALUE_KEY,
    HOT_VALUE_VALID_SECONDS,
    MAX_HOT_VALUE,
    MAX_LOAD_RATIO,
    fresh,
    read_sample,
)
from ballast.model.policy import Policy

LOAD_SOURCE_KEY = "ballast.io/load-source"
"""The node annotation naming who wrote the load annotations beside it."""

ANNOTATOR_SOURCE = "annotator"
"""The annotator's stamp (one leader writes at a time, so one identity serves every replica)."""

AGENT_SOURCE_PREFIX = "agent/"

LOAD_ANNOTATION_KEYS = (*CRANE_LOAD_METRICS, HOT_VALUE_KEY, LOAD_SOURCE_KEY)
"""Every Node annotation a load source writes. The agent's admission policy
(scheduler_config/deploy/agent-admission-policy.yaml) lets the agent change exactly these; a test keeps the
two equal."""


def agent_source(node: str) -> str:
    """The stamp of the agent on ``node``: ``agent/<node>``."""
    return f"{AGENT_SOURCE_PREFIX}{node}"


def other_fresh_source(annotations: Mapping[str, object], me: str, policy: Policy, now: float) -> str | None:
    """The identity of another source whose values on this node still count, else ``None``.

    ``me`` is the caller's own stamp. Another source's values count while any of its load samples (a policy
    metric, by that metric's validity: sync period + 5m) or its hot value (5m) is fresh: the moment all of
    them have gone stale the other writer is taken to have stopped, and the caller may write. Each value is
    read as the extender reads it (``read_sample``, strict, in the policy's legacy zone): what the extender
    takes for no information (above the sane cap, stamped in the future) is nobody's fresh value.
    """
    source = annotations.get(LOAD_SOURCE_KEY)
    if not isinstance(source, str) or not source or source == me:
        return None
    zone = policy.legacy_zone
    for metric in policy.sync_periods:
        sample, _ = read_sample(annotations.get(metric), now, legacy_zone=zone, cap=MAX_LOAD_RATIO)
        if fresh(sample, policy.valid_for(metric), now) is not None:
            return source
    hot, _ = read_sample(annotations.get(HOT_VALUE_KEY), now, legacy_zone=zone, cap=MAX_HOT_VALUE)
    if fresh(hot, HOT_VALUE_VALID_SECONDS, now) is not None:
        return source
    return None
