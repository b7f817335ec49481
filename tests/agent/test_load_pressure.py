"""Pressure metrics, pure and from fixture trees: the PSI files read, the rule that keeps a pod held at its
own CPU limit out of the node's CPU pressure, the sampler's shares, the history's windows and checkpoint. The
rule on a real kernel is measured in docs/agent.md ("Pressure"); its kernel test needs a quiet machine and
is not yet in CI."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ballast.agent.cgroup_paths import CgroupLayout, pod_cgroup_parts
from ballast.agent.load.cgroups import PodCgroups, throttled_us
from ballast.agent.load.checkpoint import decode_history, encode_history
from ballast.agent.load.history import LoadHistory, measures
from ballast.agent.load.pressure import PressureError, cpu_contention, parse_pressure, share
from ballast.agent.load.procfs import ProcReader
from ballast.agent.load.sampler import PodRef, Sampler
from ballast.contract.annotations import pressure_metric
from ballast.contract.pod import QOSClass

UID = "0f0e0d0c-1111-2222-3333-444455556666"
KERNEL_CPU = (
    "some avg10=0.61 avg60=0.41 avg300=0.62 total=994352423\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)
OLD_KERNEL_CPU = "some avg10=1.00 avg60=2.00 avg300=3.00 total=12345\n"


def test_only_the_kernels_cumulative_totals_are_read() -> None:
    totals = parse_pressure(KERNEL_CPU)
    assert (totals.some, totals.full) == (994352423, 0)
    assert parse_pressure(OLD_KERNEL_CPU).full is None  # CPU's full line came with Linux 5.13
    for bad, why in (
        ("", "no some line"),
        ("some avg10=0.00 avg60=0.00\n", "no total"),
        ("some total=lots\n", "not a number"),
        ("some total=-5\n", "negative"),
    ):
        with pytest.raises(PressureError, match=why):
            parse_pressure(bad, "/proc/pressure/cpu")


def test_a_share_is_the_counters_delta_over_wall_time() -> None:
    assert share(1_000_000, 1_250_000, 1_000_000) == 0.25
    assert share(0, 5_000_000, 1_000_000) == 1.0  # never above the whole interval
    assert share(2_000, 1_000, 1_000_000) is None  # a new cgroup under the same path
    assert share(0, 0, 0) is None


def test_a_pods_own_throttling_is_taken_off_in_the_nodes_units() -> None:
    # Alone on an idle 2-CPU node: the pod ran 0.5, was held 0.5 on its CPU: the node's some is ~0.5, n = 1.
    assert cpu_contention(0.5, 0.5, 0.52, 2) == pytest.approx(0.0, abs=0.03)
    # On eight busy CPUs the same pod's stall is 1/8 of the node's figure: only that is taken off.
    assert cpu_contention(0.3, 0.5, 8.0, 8) == pytest.approx(0.3 - 0.5 / 8)
    # Real contention with no limit reached: untouched.
    assert cpu_contention(0.52, 0.0, 2.0, 2) == 0.52
    # Unknown CPU use: every CPU counted busy, the least taken off.
    assert cpu_contention(0.4, 0.4, None, 4) == pytest.approx(0.3)
    # Never below 0, never above 1 (throttled time sums over CPUs and can exceed the wall time).
    assert cpu_contention(0.2, 3.0, 0.0, 4) == 0.0
    assert cpu_contention(1.3, 0.0, 1.0, 2) == 1.0


def test_pressure_metric_names_are_cranes_windows_over_five_series() -> None:
    wanted = pressure_metric("memory_pressure_full_max_avg_1h")
    assert wanted is not None and (wanted.series, wanted.window_minutes) == ("memory_pressure_full", 60)
    assert pressure_metric("cpu_pressure_some_avg_5m").series == "cpu_pressure_some"  # type: ignore[union-attr]
    assert pressure_metric("io_pressure_some_max_avg_1d").window_minutes == 1440  # type: ignore[union-attr]
    for name in (
        "cpu_pressure_full_avg_5m",  # 0 at the node, always
        "net_pressure_some_avg_5m",
        "cpu_pressure_some_avg_10m",
        "cpu_pressure_some_p95_5m",
        "memory_pressure_avg_5m",
    ):
        assert pressure_metric(name) is None, name
        assert not measures(name), name
    assert measures("io_pressure_full_avg_5m")


def _write(d: Path, files: dict[str, str]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)


def _psi(total: int) -> str:
    return f"some avg10=0.00 avg60=0.00 avg300=0.00 total={total}\nfull avg10=0.00 total=0\n"


def test_v2_pod_cgroups_give_throttling_and_their_own_pressure(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory io\n")
    pod = tmp_path.joinpath(*pod_cgroup_parts(UID, QOSClass.BURSTABLE, "systemd"))
    _write(pod, {
        "cpu.stat": "usage_usec 900\nthrottled_usec 4000000\nnr_periods 10\n",
        "cpu.pressure": _psi(3_000_000), "memory.pressure": _psi(7), "io.pressure": _psi(0),
    })  # fmt: skip
    read = PodCgroups(tmp_path, CgroupLayout("systemd")).read_pressure(UID, QOSClass.BURSTABLE)
    assert read is not None
    assert read.throttled_us == 4_000_000
    assert read.some_us == {"cpu": 3_000_000, "memory": 7, "io": 0}
    assert PodCgroups(tmp_path).read_pressure("no-such-pod", QOSClass.BURSTABLE) is None


def test_v1_pods_give_throttling_and_a_hybrid_hosts_unified_tree_their_pressure(tmp_path: Path) -> None:
    parts = pod_cgroup_parts(UID, QOSClass.GUARANTEED, "cgroupfs")
    _write(tmp_path.joinpath("cpuacct", *parts), {"cpuacct.usage": "100\n"})
    _write(tmp_path.joinpath("cpu", *parts), {"cpu.stat": "nr_periods 9\nthrottled_time 2500000000\n"})
    read = PodCgroups(tmp_path).read_pressure(UID, QOSClass.GUARANTEED)
    assert read is not None and read.throttled_us == 2_500_000 and read.some_us == {}  # no unified tree
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text("\n")
    _write(tmp_path.joinpath("unified", *parts), {"cpu.pressure": _psi(42)})
    read = PodCgroups(tmp_path).read_pressure(UID, QOSClass.GUARANTEED)
    assert read is not None and read.some_us == {"cpu": 42}  # memory and io files absent: left out
    assert throttled_us("usage_usec 5\n", 2) is None  # the cpu controller not enabled for it


class Clock:
    def __init__(self) -> None:
        self.mono = 1_000_000_000_000

    def monotonic(self) -> int:
        return self.mono


def _proc(root: Path, busy: int, idle: int, cpu_some: int, mem: tuple[int, int] = (0, 0)) -> None:
    _write(root, {
        "stat": f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 0 0 0 0\ncpu1 0 0 0 0\n",
        "meminfo": "MemTotal: 1000 kB\nMemAvailable: 500 kB\n",
    })  # fmt: skip
    _write(root / "pressure", {
        "cpu": f"some avg10=0 avg60=0 avg300=0 total={cpu_some}\nfull avg10=0 avg60=0 avg300=0 total=0\n",
        "memory": f"some avg10=0 total={mem[0]}\nfull avg10=0 total={mem[1]}\n",
        "io": "some avg10=0 total=0\nfull avg10=0 total=0\n",
    })  # fmt: skip


def test_the_sampler_gives_the_nodes_shares_with_the_pods_own_throttling_taken_out(tmp_path: Path) -> None:
    """Two CPUs, 10 s: the node 0.5 busy-core, its CPU some 5 s (0.5), one pod held 5 s by its limit."""
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    (cg / "cgroup.controllers").parent.mkdir(parents=True)
    (cg / "cgroup.controllers").write_text("cpu\n")
    pod_dir = cg.joinpath(*pod_cgroup_parts(UID, QOSClass.BURSTABLE, "cgroupfs"))
    ref = PodRef(UID, "ns", "burner", QOSClass.BURSTABLE)
    clock = Clock()
    sampler = Sampler(ProcReader(proc), PodCgroups(cg), monotonic=clock.monotonic)

    _proc(proc, busy=0, idle=0, cpu_some=0, mem=(0, 0))
    _write(pod_dir, {"cpu.stat": "usage_usec 0\nthrottled_usec 0\n", "cpu.pressure": _psi(0)})
    first = sampler.sample([ref], pressure=True)
    assert first.pressure == {} and first.pods[UID].throttled is None  # a share needs two reads

    clock.mono += 10 * 10**9
    _proc(proc, busy=250, idle=750, cpu_some=5_000_000, mem=(1_000_000, 500_000))
    _write(
        pod_dir, {"cpu.stat": "usage_usec 5000000\nthrottled_usec 5000000\n", "cpu.pressure": _psi(5_000_000)}
    )
    second = sampler.sample([ref], pressure=True)
    assert second.pressure["memory_pressure_some"] == pytest.approx(0.1)
    assert second.pressure["memory_pressure_full"] == pytest.approx(0.05)
    assert second.pressure["io_pressure_full"] == 0.0
    assert "cpu_pressure_full" not in second.pressure
    # raw 0.5; busy 0.5 cores + 0.5 throttled = one non-idle CPU: the pod's 0.5 comes off entirely
    assert second.pressure["cpu_pressure_some"] == pytest.approx(0.0, abs=1e-9)
    assert second.pods[UID].throttled == pytest.approx(0.5)
    assert second.pods[UID].pressure == {"cpu": pytest.approx(0.5)}

    clock.mono += 10 * 10**9
    plain = sampler.sample([ref])  # pressure not asked for: nothing read, nothing given
    assert plain.pressure == {} and plain.pods[UID].pressure == {} and plain.pods[UID].throttled is None


def test_without_psi_the_metrics_are_absent_said_once_and_nothing_else_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc = tmp_path / "proc"
    _proc(proc, busy=0, idle=0, cpu_some=0)
    for f in (proc / "pressure").iterdir():
        f.unlink()
    (proc / "pressure").rmdir()
    clock = Clock()
    sampler = Sampler(ProcReader(proc), None, monotonic=clock.monotonic)
    caplog.set_level(logging.INFO, "ballast.agent.load")
    readings = []
    for busy in (0, 100, 200):
        _write(proc, {"stat": f"cpu  {busy} 0 0 {300 - busy} 0 0 0 0 0 0\ncpu0 0\n"})
        readings.append(sampler.sample([], pressure=True))
        clock.mono += 10**10
    assert all(r.pressure == {} for r in readings)
    assert readings[-1].cpu_ratio is not None and readings[-1].mem_ratio == 0.5
    assert caplog.text.count("pressure metrics are not measured") == 1
    assert sampler.psi_unavailable is not None


def test_pressure_windows_are_cranes_and_a_policy_without_them_keeps_no_series(tmp_path: Path) -> None:
    h = LoadHistory()
    t0 = 1_800_000_000.0 - 1_800_000_000.0 % 60
    assert set(h.ratios) == {"cpu", "mem"}
    for i in range(6 * 20):  # twenty minutes: a 0.6 stall for its first five, 0.1 after
        t = t0 + 10 * i
        h.add_node(t, 0.5, 1.0, 0.25, 1 << 30)
        h.add_pressure(t, {"cpu_pressure_some": 0.6 if i < 30 else 0.1, "bogus": 1.0})
    now = t0 + 10 * (6 * 20 - 1)
    got = h.values(
        now, ["cpu_pressure_some_avg_5m", "cpu_pressure_some_max_avg_1h", "io_pressure_full_avg_5m"], 10
    )
    assert got["cpu_pressure_some_avg_5m"] == pytest.approx(0.1)
    assert got["cpu_pressure_some_max_avg_1h"] == pytest.approx(0.6)
    assert "io_pressure_full_avg_5m" not in got  # never sampled: absent, not 0
    assert set(h.ratios) == {"cpu", "mem", "cpu_pressure_some"}
    # the checkpoint keeps the series across a restart
    restored = decode_history(encode_history(h))
    assert restored.values(now, ["cpu_pressure_some_max_avg_1h"], 10) == {"cpu_pressure_some_max_avg_1h": 0.6}
    with pytest.raises(ValueError, match="series must hold"):
        decode_history(encode_history(h).replace(b'"cpu_pressure_some"', b'"cpu_pressure_full"'))


def test_a_pods_pressure_is_a_window_mean_and_goes_with_the_pod() -> None:
    h = LoadHistory()
    t0 = 1_800_000_000.0
    for i in range(6):
        h.add_pod(t0 + 10 * i, "p", 0.5, 1 << 20)
        h.add_pod_pressure(t0 + 10 * i, "p", {"cpu": 0.2 * (i % 2), "throttled": 0.4, "nonsense": 9.0})
    assert h.pod_pressure_means(t0 + 50) == {
        "p": {"cpu": pytest.approx(0.1), "throttled": pytest.approx(0.4)}
    }
    h.expire(t0 + 50 + 6 * 60)
    assert h.pod_pressure_means(t0 + 50 + 6 * 60) == {}


def test_pods_without_throttled_time_are_said_once_to_count_in_the_nodes_cpu_pressure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """v2 without ``cpu`` in the parents' ``subtree_control``: ``cpu.stat`` has no ``throttled_usec``."""
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    _write(cg, {"cgroup.controllers": "memory\n"})
    pod_dir = cg.joinpath(*pod_cgroup_parts(UID, QOSClass.BURSTABLE, "cgroupfs"))
    _write(pod_dir, {"cpu.stat": "usage_usec 0\n", "cpu.pressure": _psi(0)})
    _proc(proc, busy=0, idle=0, cpu_some=0)
    ref = PodRef(UID, "ns", "p", QOSClass.BURSTABLE)
    sampler = Sampler(ProcReader(proc), PodCgroups(cg))
    caplog.set_level(logging.INFO, "ballast.agent.load")
    for _ in range(3):
        sampler.sample([ref], pressure=True)
    assert caplog.text.count("cannot be told from contention") == 1 and sampler.throttling_unknown
    _write(pod_dir, {"cpu.stat": "usage_usec 0\nthrottled_usec 0\n"})
    sampler.sample([ref], pressure=True)
    assert not sampler.throttling_unknown and "can be read again" in caplog.text
