"""When each policy metric is synced next: pure, driven by a monotonic clock the caller passes in.

Each metric has its own period (crane's tickers: ``cpu_usage_avg_5m`` every 3m, ``..._1d`` every 3h).
Metrics that fall due together are synced in one cycle, so a node gets one patch for all of them. A
failed query is retried sooner than its period, with crane's backoff (10s doubling to 6m, but never
later than the period), because the node keeps its old value only until that value expires. The hot
value is refreshed with every cycle and at least every ``hot_interval``.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["RETRY_INITIAL_SECONDS", "RETRY_MAX_SECONDS", "Schedule"]

RETRY_INITIAL_SECONDS = 10.0
RETRY_MAX_SECONDS = 360.0


class Schedule:
    def __init__(
        self,
        periods: Mapping[str, float],
        hot_interval: float,
        *,
        retry_initial: float = RETRY_INITIAL_SECONDS,
        retry_max: float = RETRY_MAX_SECONDS,
    ) -> None:
        if hot_interval <= 0:
            raise ValueError("hot_interval must be positive")
        self.periods = dict(periods)
        self.hot_interval = hot_interval
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self._next: dict[str, float] = dict.fromkeys(self.periods, float("-inf"))
        self._retry: dict[str, float] = {}
        self._next_hot = float("-inf")

    def reset(self) -> None:
        """Everything is due now (start, or leadership just acquired: the old leader's plan is unknown)."""
        self._next = dict.fromkeys(self.periods, float("-inf"))
        self._retry.clear()
        self._next_hot = float("-inf")

    def due(self, now: float) -> list[str]:
        """Metrics to sync in a cycle starting at ``now``, in policy order."""
        return [m for m, at in self._next.items() if at <= now]

    def done(self, metric: str, now: float, ok: bool) -> None:
        """Record a sync attempt of ``metric`` that started at ``now``."""
        period = self.periods[metric]
        if ok:
            self._retry.pop(metric, None)
            self._next[metric] = now + period
            return
        delay = min(self._retry.get(metric, self.retry_initial), period)
        self._retry[metric] = min(delay * 2, self.retry_max)
        self._next[metric] = now + delay

    def cycle_done(self, now: float) -> None:
        """A cycle (which always refreshes the hot value) started at ``now``."""
        self._next_hot = now + self.hot_interval

    def next_wakeup(self) -> float:
        """When the next cycle is due: the earliest metric, or the hot-value refresh."""
        return min([self._next_hot, *self._next.values()])
