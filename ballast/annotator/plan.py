"""Which annotations to write to which node this cycle: pure, no I/O.

crane patched every (node, metric) every period and the hot value after each of them, with a fresh
timestamp every time, so every write fanned out to every Node watcher. Ballast sends at most one merge
patch per node per cycle, and only when it carries news:

- a load value whose 5-decimal text differs from the node's current one, or whose current timestamp
  would expire (timestamp + sync period + 5m) before the metric's next sync (plus a margin for a late
  cycle), or that is missing, unreadable or stamped in the future (crane's local-time stamps);
- a hot value that differs from the one the extender would read now (an expired hot value reads as 0),
  or a non-zero one about to expire. A zero hot value never needs refreshing: expired reads as 0 too.

When a node is patched anyway, every value synced this cycle rides along with a fresh timestamp (it
costs no extra request and delays the next refresh). Every patch carries the writer's stamp
(``ballast.io/load-source``), and a node whose stamp names another writer is patched as soon as there is a
value to write (the controller has already left alone the nodes where that writer's values are fresh).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import tzinfo

from ballast.contract.annotations import (
    HOT_VALUE_KEY,
    HOT_VALUE_VALID_SECONDS,
    MAX_HOT_VALUE,
    format_hot_value,
    format_load,
    fresh,
    read_sample,
)
from ballast.model.load_source import LOAD_SOURCE_KEY

__all__ = ["FUTURE_SKEW_SECONDS", "REFRESH_MARGIN_SECONDS", "NodePatch", "PatchPlanner", "ratio_text"]

REFRESH_MARGIN_SECONDS = 30.0
"""A value is refreshed when it would expire less than this long after its next scheduled sync."""
FUTURE_SKEW_SECONDS = 60.0
"""A stamp further in the future than this is not trusted (crane's local time with a literal Z, 8h
ahead in Asia/Shanghai, stayed "fresh" for hours): it is rewritten."""


def ratio_text(ratio: float) -> str:
    return f"{ratio:.5f}"


@dataclass(frozen=True, slots=True)
class NodePatch:
    node: str
    annotations: dict[str, str]
    changed: tuple[str, ...]
    """Keys whose value changed (the rest are refreshes of expiring or piggy-backed values)."""

    def body(self) -> dict[str, dict[str, dict[str, str]]]:
        """The merge patch (``application/merge-patch+json``)."""
        return {"metadata": {"annotations": dict(self.annotations)}}


class PatchPlanner:
    """Decides one node's patch from its current annotations and this cycle's values.

    ``valid_for[key]``: seconds a value counts after its timestamp (``Policy.valid_for``);
    ``next_sync[key]``: seconds until the key is synced again (its period, or the hot-value interval).
    """

    def __init__(
        self,
        valid_for: Mapping[str, float],
        next_sync: Mapping[str, float],
        hot_interval: float,
        *,
        legacy_zone: tzinfo | None = None,
        margin: float = REFRESH_MARGIN_SECONDS,
        source: str | None = None,
    ) -> None:
        self.valid_for = dict(valid_for)
        self.next_sync = dict(next_sync)
        self.hot_interval = hot_interval
        self.legacy_zone = legacy_zone
        self.margin = margin
        self.source = source
        """The writer's stamp for ``ballast.io/load-source`` (``None``: no stamp)."""

    def plan(
        self,
        node: str,
        current: Mapping[str, str],
        loads: Mapping[str, float],
        hot: int | None,
        now: float,
    ) -> NodePatch | None:
        """``loads``: metric -> ratio for the metrics synced this cycle that have data for this node;
        ``hot``: this cycle's hot value, or ``None`` when the policy has no hot-value windows."""
        changed: list[str] = []
        needed = False
        zone = self.legacy_zone
        for key, ratio in loads.items():
            # Read as written (not strict): the question is whether the node already carries this text
            # with a stamp that outlives the next sync; a stamp ahead is rewritten below.
            old, _ = read_sample(current.get(key), now, legacy_zone=zone, strict=False)
            if old is None or ratio_text(old.value) != ratio_text(ratio):
                changed.append(key)
                needed = True
            elif (
                old.timestamp + self.valid_for[key] <= now + self.next_sync[key] + self.margin
                or old.timestamp > now + FUTURE_SKEW_SECONDS
            ):
                needed = True
        hot_needed = False
        if hot is not None:
            # Read as the extender reads it: a value it refuses (stamped ahead, above the cap) reads as 0.
            old, _ = read_sample(current.get(HOT_VALUE_KEY), now, legacy_zone=zone, cap=MAX_HOT_VALUE)
            counted = fresh(old, HOT_VALUE_VALID_SECONDS, now)
            reads_now = int(counted.value) if counted is not None else 0
            if hot != reads_now:
                changed.append(HOT_VALUE_KEY)
                hot_needed = True
            elif hot > 0 and (
                old is None
                or old.timestamp + HOT_VALUE_VALID_SECONDS <= now + self.hot_interval + self.margin
            ):
                hot_needed = True
        restamp = (
            self.source is not None
            and current.get(LOAD_SOURCE_KEY) != self.source
            and bool(loads or (hot is not None and hot > 0))
        )
        if restamp:
            changed.append(LOAD_SOURCE_KEY)
        if not needed and not hot_needed and not restamp:
            return None
        annotations = {key: format_load(ratio, now) for key, ratio in loads.items()}
        if hot is not None and (hot_needed or hot > 0):
            annotations[HOT_VALUE_KEY] = format_hot_value(hot, now)
        if self.source is not None:
            annotations[LOAD_SOURCE_KEY] = self.source
        return NodePatch(node, annotations, tuple(changed))
