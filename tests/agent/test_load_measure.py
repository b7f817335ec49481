"""The load measurement's pure parts and the layouts this machine lacks (fixture trees): crane's CPU
rule on ``/proc/stat`` lines, ``/proc/meminfo``, pod cgroup paths and working sets for v1/v2 x
cgroupfs/systemd, the per-minute history's windows, and its checkpoint."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ballast.agent.cgroup_paths import CgroupLayout
from ballast.agent.load.cgroups import PodCgroups, PodCounters, inactive_file, working_set
from ballast.agent.load.checkpoint import HistoryCheckpoint, decode_history, encode_history
from ballast.agent.load.history import LoadHistory, MinuteSeries
from ballast.agent.load.procfs import CPUTimes, ProcError, cpu_utilisation, parse_meminfo, parse_stat
from ballast.contract.pod import QOSClass

STAT = """cpu  {user} 0 {system} {idle} {iowait} 0 0 {steal} {guest} 0
cpu0 1 0 1 1 0 0 0 0 0 0
cpu1 1 0 1 1 0 0 0 0 0 0
intr 1
"""


def _stat(user=0, system=0, idle=0, iowait=0, steal=0, guest=0) -> CPUTimes:
    return parse_stat(
        STAT.format(user=user, system=system, idle=idle, iowait=iowait, steal=steal, guest=guest)
    )


def test_cranes_rule_counts_iowait_and_steal_busy_and_never_adds_guest() -> None:
    before = _stat()
    # 100 ticks: 20 user (10 of them guest, already inside user), 10 iowait, 10 steal, 60 idle.
    after = _stat(user=20, iowait=10, steal=10, idle=60, guest=10)
    assert after.cpus == 2
    assert cpu_utilisation(before, after) == pytest.approx(0.40)


def test_a_counter_going_backwards_adds_nothing_and_no_ticks_is_no_figure() -> None:
    before = _stat(user=100, idle=100, iowait=50)
    after = _stat(user=150, idle=150, iowait=40)  # iowait "may decrease" (proc_stat(5))
    assert cpu_utilisation(before, after) == pytest.approx(0.5)
    assert cpu_utilisation(after, after) is None


def test_proc_files_that_are_not_the_kernels_are_refused_with_the_file_named() -> None:
    with pytest.raises(ProcError, match="/proc/stat"):
        parse_stat("intr 1\n")
    with pytest.raises(ProcError, match="MemAvailable"):
        parse_meminfo("MemTotal: 100 kB\n")
    info = parse_meminfo("MemTotal:       1000 kB\nMemFree: 10 kB\nMemAvailable:    250 kB\n")
    assert (info.total, info.available, info.used) == (1024000, 256000, 768000)
    assert info.utilisation == pytest.approx(0.75)


def _write(d: Path, files: dict[str, str]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)


UID = "6f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"
UID_ = UID.replace("-", "_")


@pytest.mark.parametrize(
    ("version", "driver", "qos", "cpu_dir", "memory_dir"),
    [
        (
            1,
            "systemd",
            QOSClass.BURSTABLE,
            f"cpu,cpuacct/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",
            f"memory/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",
        ),
        (
            1,
            "systemd",
            QOSClass.GUARANTEED,
            f"cpu,cpuacct/kubepods.slice/kubepods-pod{UID_}.slice",
            f"memory/kubepods.slice/kubepods-pod{UID_}.slice",
        ),
        (
            2,
            "systemd",
            QOSClass.BEST_EFFORT,
            f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice",
            None,
        ),
        (2, "cgroupfs", QOSClass.BURSTABLE, f"kubepods/burstable/pod{UID}", None),
    ],
)
def test_layouts_this_machine_lacks_from_fixture_trees(
    tmp_path: Path, version: int, driver: str, qos: QOSClass, cpu_dir: str, memory_dir: str | None
) -> None:
    if version == 2:
        (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
        _write(
            tmp_path / cpu_dir,
            {
                "cpu.stat": "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n",
                "memory.current": str(300 << 20),
                "memory.stat": f"anon {200 << 20}\nactive_file 0\ninactive_file {40 << 20}\n",
            },
        )
    else:
        _write(tmp_path / cpu_dir, {"cpuacct.usage": "2500000000\n"})
        assert memory_dir is not None
        _write(
            tmp_path / memory_dir,
            {
                "memory.usage_in_bytes": str(300 << 20),
                # the hierarchical total, not the pod cgroup's own inactive_file, is subtracted
                "memory.stat": f"inactive_file 1\ntotal_inactive_file {40 << 20}\n",
            },
        )
    cgroups = PodCgroups(tmp_path, CgroupLayout(driver))
    assert cgroups.version == version
    counters = cgroups.read(UID, qos)
    assert counters is not None
    assert counters.cpu_ns == 2_500_000_000
    assert counters.working_set == 260 << 20
    # The QoS class guessed wrong (a resize moved the pod): the other parents are searched.
    other = QOSClass.GUARANTEED if qos is not QOSClass.GUARANTEED else QOSClass.BURSTABLE
    assert PodCgroups(tmp_path, CgroupLayout(driver)).read(UID, other) == counters


def test_working_set_is_usage_minus_inactive_file_never_below_zero(tmp_path: Path) -> None:
    assert working_set(100, 30) == 70
    assert working_set(100, 300) == 0  # usage_in_bytes is a "fuzz value"; inactive can exceed it
    assert inactive_file("total_inactive_file 7\n", 1) == 7
    assert inactive_file("inactive_file 7\n", 1) == 0  # v1's own-cgroup key is not the hierarchy's
    assert inactive_file("inactive_file 7\n", 2) == 7
    # v2 without the memory controller delegated: CPU still counts, the working set is unknown.
    (tmp_path / "cgroup.controllers").write_text("")
    _write(tmp_path / "kubepods" / f"pod{UID}", {"cpu.stat": "usage_usec 10\n"})
    counters = PodCgroups(tmp_path).read(UID, QOSClass.GUARANTEED)
    assert counters is not None and counters.cpu_ns == 10_000 and counters.working_set is None
    assert PodCgroups(tmp_path).read("no-such-pod", QOSClass.GUARANTEED) is None


# --- history ------------------------------------------------------------------------------------------

T0 = 1_800_000_000.0 - 1_800_000_000.0 % 60  # a minute boundary


def test_the_5m_mean_is_the_mean_of_what_there_is_on_a_new_node() -> None:
    s = MinuteSeries()
    assert s.avg(T0) is None and s.max_avg(T0, 60) is None
    s.add(T0 + 5, 0.2)
    s.add(T0 + 15, 0.4)
    assert s.avg(T0 + 20) == pytest.approx(0.3)  # one minute of history: its mean
    assert s.max_avg(T0 + 20, 1440) == pytest.approx(0.3)
    s.add(T0 + 65, 0.6)
    assert s.avg(T0 + 70) == pytest.approx(0.4)  # two minutes, each sample counts once


def test_max_avg_is_the_largest_5m_mean_of_the_window_not_the_largest_minute() -> None:
    s = MinuteSeries()
    for minute in range(120):
        s.add(T0 + minute * 60, 1.0 if minute == 30 else 0.0)  # one hot minute, 90 minutes ago
    now = T0 + 119 * 60
    assert s.avg(now) == 0.0
    assert s.max_avg(now, 60) == 0.0  # the hot minute left the hour's 5-minute means
    assert s.max_avg(now, 1440) == pytest.approx(0.2)  # 1.0 in a 5-minute mean of five minutes


def test_the_ring_forgets_beyond_its_size_and_gaps_hold_nothing() -> None:
    s = MinuteSeries(size=10)
    s.add(T0, 0.9)
    s.add(T0 + 5 * 60, 0.1)  # the agent was down for four minutes
    assert s.means(T0 + 5 * 60, 6) == [0.9, None, None, None, None, 0.1]
    assert s.avg(T0 + 5 * 60) == pytest.approx(0.1)  # the 0.9 is six minutes old
    s.add(T0 + 12 * 60, 0.3)
    assert s.mean_at(minute := int(T0 // 60)) is None and s.mean_at(minute + 12) == 0.3
    s.add(T0, 0.5)  # older than the ring: dropped
    assert s.mean_at(minute + 5) == 0.1
    assert s.max_avg(T0 + 12 * 60, 10) == pytest.approx(0.3)  # no 5-minute mean holds both
    s.add(T0 + 12 * 60, math.nan)
    assert s.avg(T0 + 12 * 60) == pytest.approx(0.3)


def test_crane_names_map_to_the_windows_and_unknown_names_are_not_the_agents() -> None:
    h = LoadHistory()
    for minute in range(10):
        h.add_node(T0 + minute * 60, 0.5 if minute < 5 else 0.1, 1.0, 0.25, 1 << 30)
    values = h.values(
        T0 + 9 * 60,
        ["cpu_usage_avg_5m", "cpu_usage_max_avg_1h", "mem_usage_max_avg_1d", "gpu_usage_avg_5m"],
        60.0,
    )
    assert values == pytest.approx(
        {"cpu_usage_avg_5m": 0.1, "cpu_usage_max_avg_1h": 0.5, "mem_usage_max_avg_1d": 0.25}
    )


def test_pods_have_window_means_and_are_forgotten_a_window_after_their_last_sample() -> None:
    h = LoadHistory()
    h.add_pod(T0, "a", None, 100)  # first read: no rate yet
    h.add_pod(T0 + 10, "a", 0.5, 300)
    h.add_pod(T0 + 70, "a", 0.25, 200)
    h.add_pod(T0 + 70, "b", 0.1, None)  # no memory files: not listed
    assert h.pod_means(T0 + 70) == {"a": (pytest.approx(0.375), 200)}
    h.expire(T0 + 70 + 5 * 60)
    assert set(h.pods) == set()


# --- checkpoint ---------------------------------------------------------------------------------------


def test_the_checkpoint_keeps_the_day_across_a_restart(tmp_path: Path) -> None:
    h = LoadHistory()
    for minute in range(0, 1440, 7):
        h.add_node(T0 + minute * 60, minute / 1440, None, 0.5, 1)
    now = T0 + 1439 * 60
    path = tmp_path / "load_history"
    HistoryCheckpoint(path).save(h)
    assert path.stat().st_size < 32 * 1024
    restored = HistoryCheckpoint(path).load()
    names = ["cpu_usage_max_avg_1d", "cpu_usage_max_avg_1h", "cpu_usage_avg_5m", "mem_usage_max_avg_1d"]
    assert restored.values(now, names, 10.0) == pytest.approx(h.values(now, names, 10.0), abs=1e-5)
    assert decode_history(encode_history(restored)).ratios["cpu"].to_minutes()[0] == int(T0 // 60) + 1435


def spiky(t: float) -> float:
    """A node at 0.12 with a burst to 0.80 for 20 s every 100 s: its 5-minute mean is about 0.256, a fifth
    of its seconds near full."""
    return 0.80 if (t - T0 - 37) % 100 < 20 else 0.12


def true_mean(samples: list[tuple[float, float]], now: float) -> float:
    """``avg_over_time(...[5m])`` at ``now``: every sample of the last 300 s, equally weighted."""
    window = [v for t, v in samples if now - 300 < t <= now]
    return sum(window) / len(window)


def test_the_5m_mean_counts_each_sample_of_the_last_300s_on_a_spiky_node(tmp_path: Path) -> None:
    """Every report (10-s samples, as the agent takes them) is within 0.02 of crane's 5-minute mean, across
    a restart from the checkpoint; a mean of minute means swung by a third around it here."""
    h = LoadHistory()
    samples: list[tuple[float, float]] = []
    worst = 0.0
    path = tmp_path / "load_history"
    for i in range(6 * 60):  # an hour of samples
        now = T0 + 7 + 10 * i
        h.add_node(now, spiky(now), 1.0, 0.5, 1)
        samples.append((now, spiky(now)))
        if i == 200:  # the agent restarts: the checkpoint is all it keeps
            HistoryCheckpoint(path).save(h)
            h = HistoryCheckpoint(path).load()
        if now - T0 >= 300:
            value = h.values(now, ["cpu_usage_avg_5m"], 10.0)["cpu_usage_avg_5m"]
            worst = max(worst, abs(value - true_mean(samples, now)))
    assert worst <= 0.02, worst
    # the hour's maximum: the 5-minute mean as the rule records it at every minute of the hour (a new
    # node's first windows hold what there is), and at this moment
    now = T0 + 7 + 10 * 359
    recorded = [true_mean(samples, T0 + 60 * (m + 1) - 0.001) for m in range(60)]
    hour = h.values(now, ["cpu_usage_max_avg_1h"], 10.0)["cpu_usage_max_avg_1h"]
    assert hour == pytest.approx(max(*recorded, true_mean(samples, now)), abs=0.02)


def test_a_first_format_checkpoint_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "load_history"
    minute = int(T0 // 60)
    series = {"size": 1440, "lastMinute": minute}
    doc = {"cpu": {**series, "means": [0.5, 0.3]}, "mem": {**series, "means": [0.2]}}
    path.write_text(json.dumps({"format": "ballast.io/load-history/v1", "series": doc}))
    checkpoint = HistoryCheckpoint(path)
    restored = checkpoint.load()
    assert checkpoint.rejected is None
    assert restored.ratios["cpu"].avg(T0, 5) == pytest.approx(0.4)  # each minute one sample
    assert restored.values(T0, ["cpu_usage_avg_5m"], 10.0) == {}  # no samples of the last 5 minutes kept


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b'{"format": "other"}',
        b'{"format": "ballast.io/load-history/v1", "series": {"cpu": 1}}',
        b'{"format": "ballast.io/load-history/v1", "series": {"cpu": {"size": 3, "lastMinute": 9, '
        b'"means": [0.1, 7]}, "mem": {"size": 3, "lastMinute": 9, "means": []}}}',
        b'{"format": "ballast.io/load-history/v2", "series": {"cpu": {"size": 3, "lastMinute": 9, '
        b'"means": [0.1], "counts": [6, 6]}, "mem": {"size": 3, "lastMinute": 9, "means": [], '
        b'"counts": []}}, "recent": {}}',
        b'{"format": "ballast.io/load-history/v2", "series": {"cpu": {"size": 3, "lastMinute": 9, '
        b'"means": [0.1], "counts": [6]}, "mem": {"size": 3, "lastMinute": 9, "means": [], "counts": []}}, '
        b'"recent": {"cpu": [[1800000000, 1.5]]}}',
    ],
)
def test_a_corrupt_checkpoint_is_set_aside_and_the_history_starts_empty(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "load_history"
    path.write_bytes(content)
    checkpoint = HistoryCheckpoint(path, clock=lambda: T0)
    history = checkpoint.load()
    assert checkpoint.rejected is not None
    assert history.ratios["cpu"].to_minutes() == (None, [], [])
    assert not path.exists()
    assert [p.read_bytes() for p in tmp_path.glob("load_history.corrupt-*")] == [content]
    HistoryCheckpoint(path).save(history)  # and the next save writes a good one in its place
    assert HistoryCheckpoint(path).load() is not None and path.exists()


def test_without_the_kubelets_settings_the_layout_is_guessed_from_the_tree(tmp_path: Path) -> None:
    from ballast.agent.load.loop import guess_layout

    def tree(name: str, *dirs: str, v2: bool = False) -> Path:
        root = tmp_path / name
        for d in dirs:
            (root / ("" if v2 else "cpuacct") / d).mkdir(parents=True)
        if v2:
            (root / "cgroup.controllers").write_text("cpu memory\n")
        return root

    assert guess_layout(tree("sd", "kubepods.slice")) == CgroupLayout("systemd")
    assert guess_layout(tree("fs", "kubepods/burstable", v2=True)) == CgroupLayout("cgroupfs")
    # a kubelet with a cgroupRoot of its own: kind's /kubelet under systemd, a test node's /rn1
    kind = tree("kind", "kubelet.slice/kubelet-kubepods.slice", "system.slice", v2=True)
    assert guess_layout(kind) == CgroupLayout("systemd", "/kubelet")
    assert guess_layout(tree("rn", "rn1/kubepods/besteffort", "user")) == CgroupLayout("cgroupfs", "/rn1")
    # two kubelets' trees (two test nodes on one host): nothing to choose by, the kubelet's defaults
    assert guess_layout(tree("two", "rn1/kubepods", "rn2/kubepods")) == CgroupLayout()
    assert guess_layout(tmp_path / "nothing") == CgroupLayout()


def test_a_custom_cgroup_root_is_where_the_pod_cgroups_are_read(tmp_path: Path) -> None:
    _write(tmp_path / f"cpuacct/rn1/kubepods/burstable/pod{UID}", {"cpuacct.usage": "7000\n"})
    assert PodCgroups(tmp_path).read(UID, QOSClass.BURSTABLE) is None  # the default root looks in /kubepods
    custom = PodCgroups(tmp_path, CgroupLayout("cgroupfs", "/rn1"))
    assert custom.read(UID, QOSClass.BURSTABLE) == PodCounters(7000, None)
    assert custom.kubepods_dir() == tmp_path / "cpuacct/rn1/kubepods"
    # without cgroupsPerQOS the kubelet makes no pod cgroups: nothing to read, and nowhere to look
    flat = PodCgroups(tmp_path, CgroupLayout("cgroupfs", "/rn1", per_qos=False))
    assert flat.read(UID, QOSClass.BURSTABLE) is None and flat.kubepods_dir() is None


# --- percentiles --------------------------------------------------------------------------------------


def test_a_percentile_is_koordlets_sorted_sample_and_waits_for_half_a_window() -> None:
    h = LoadHistory()
    names = [
        "cpu_usage_p50_5m",
        "cpu_usage_p95_5m",
        "cpu_usage_p99_5m",
        "mem_usage_p90_10m",
        "gpu_usage_p95_5m",
    ]
    for i in range(1, 31):  # 30 samples, 10 s apart: 0.01 .. 0.30, newest last
        now = T0 + 10 * i
        h.add_node(now, i / 100, None, 0.5, 1)
        values = h.values(now, names, 10.0)
        if i < 15:  # under half of the 5-minute window's 30 samples: omitted
            assert "cpu_usage_p95_5m" not in values, i
    assert values["cpu_usage_p50_5m"] == pytest.approx(0.15)  # sorted[30 * 50 // 100 - 1]
    assert values["cpu_usage_p95_5m"] == pytest.approx(0.28)  # sorted[30 * 95 // 100 - 1]
    assert values["cpu_usage_p99_5m"] == pytest.approx(0.29)  # sorted[29 - 1]
    assert values["mem_usage_p90_10m"] == pytest.approx(0.5)  # 30 of 60 samples: half a window is enough
    assert "gpu_usage_p95_5m" not in values
    # the p95 of a spiky node sees its bursts, its mean does not
    spiky_history = LoadHistory()
    for i in range(6 * 30):
        spiky_history.add_node(T0 + 10 * i, spiky(T0 + 10 * i), None, 0.5, 1)
    now = T0 + 10 * (6 * 30 - 1)
    spiky_values = spiky_history.values(
        now, ["cpu_usage_avg_5m", "cpu_usage_p95_5m", "cpu_usage_p95_30m"], 10.0
    )
    assert spiky_values["cpu_usage_avg_5m"] < 0.3
    assert spiky_values["cpu_usage_p95_5m"] == spiky_values["cpu_usage_p95_30m"] == pytest.approx(0.8)


def test_the_checkpoint_keeps_the_percentiles_samples(tmp_path: Path) -> None:
    h = LoadHistory()
    for i in range(6 * 30):
        h.add_node(T0 + 10 * i, spiky(T0 + 10 * i), None, 0.5, 1)
    path = tmp_path / "load_history"
    HistoryCheckpoint(path).save(h)
    now = T0 + 10 * (6 * 30 - 1)
    names = ["cpu_usage_p50_30m", "cpu_usage_p95_10m", "mem_usage_p99_5m"]
    assert HistoryCheckpoint(path).load().values(now, names, 10.0) == h.values(now, names, 10.0)
    assert path.stat().st_size < 64 * 1024
