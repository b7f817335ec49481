"""Per-metric periods, shared cycles, retry backoff and the hot-value refresh."""

from __future__ import annotations

from ballast.annotator.schedule import Schedule

PERIODS = {"cpu_usage_avg_5m": 180.0, "cpu_usage_max_avg_1h": 900.0, "cpu_usage_max_avg_1d": 10800.0}


def test_everything_is_due_first_then_each_on_its_period() -> None:
    s = Schedule(PERIODS, 60)
    assert s.due(0) == list(PERIODS)
    for m in s.due(0):
        s.done(m, 0, ok=True)
    s.cycle_done(0)
    assert s.next_wakeup() == 60  # the hot value
    assert s.due(60) == []
    assert s.due(180) == ["cpu_usage_avg_5m"]
    s.done("cpu_usage_avg_5m", 180, ok=True)
    assert s.due(900) == ["cpu_usage_avg_5m", "cpu_usage_max_avg_1h"]  # together: one patch per node


def test_failures_retry_with_backoff_capped_by_the_period() -> None:
    s = Schedule(PERIODS, 60)
    delays = []
    now = 0.0
    for _ in range(8):
        s.done("cpu_usage_max_avg_1d", now, ok=False)
        nxt = min(t for m, t in s._next.items() if m == "cpu_usage_max_avg_1d")
        delays.append(nxt - now)
        now = nxt
    assert delays == [10, 20, 40, 80, 160, 320, 360, 360]
    s = Schedule(PERIODS, 60)
    now, delays = 0.0, []
    for _ in range(7):
        s.done("cpu_usage_avg_5m", now, ok=False)
        nxt = s._next["cpu_usage_avg_5m"]
        assert "cpu_usage_avg_5m" not in s.due(nxt - 1) and "cpu_usage_avg_5m" in s.due(nxt)
        delays.append(nxt - now)
        now = nxt
    assert delays == [10, 20, 40, 80, 160, 180, 180]  # never later than the period
    s.done("cpu_usage_avg_5m", now, ok=True)  # success resets the backoff
    s.done("cpu_usage_avg_5m", now + 180, ok=False)
    assert s._next["cpu_usage_avg_5m"] == now + 190


def test_reset_makes_everything_due() -> None:
    s = Schedule(PERIODS, 60)
    for m in PERIODS:
        s.done(m, 0, ok=True)
    s.cycle_done(0)
    s.reset()
    assert s.due(1) == list(PERIODS) and s.next_wakeup() == float("-inf")
