"""``make bench`` (``python -m bench``): a bench whose real parts are missing says what is missing, and the
others still run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import bench.__main__ as runner
from ballast.testing.parts import ROOT


@pytest.fixture
def nothing_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Prometheus on PATH and no Kubernetes binaries anywhere."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    monkeypatch.setenv("BALLAST_KUBE_BIN", str(tmp_path / "no-binaries"))


def test_missing_parts_are_named_and_the_other_benches_run(
    nothing_installed: None, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []
    assert runner.run_all(runner.BENCHES, run=lambda m: ran.append(m) or 0) == 0
    assert ran == [
        "extender_bench",
        "names_bench",
        "rebalancer_bench",
        "cpu_assignment_bench",
        "reconcile_bench",
        "agent_load_bench",
        "mixed_burst",
    ]
    out = capsys.readouterr().out
    assert "prometheus and promtool not on PATH" in out
    assert out.count("BALLAST_KUBE_BIN=") == 5  # each bench that needs the control plane says why
    not_run = "annotator_bench, agent_node_bench, cluster_bench, burst_bench, mixed_cluster_bench, peak_bench"
    assert f"7 of 13 benches ran; not run: {not_run}" in out
    assert "Traceback" not in out


def test_a_bench_that_fails_fails_the_run_after_the_others(capsys: pytest.CaptureFixture[str]) -> None:
    ran: list[str] = []
    benches = [runner.Bench("a"), runner.Bench("b")]
    assert runner.run_all(benches, run=lambda m: ran.append(m) or (m == "a")) == 1
    assert ran == ["a", "b"]
    assert "failed: a" in capsys.readouterr().out


def test_the_makefile_runs_the_benches_through_the_runner() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nbench:")[1].split("\n\n")[0]
    assert "-m bench\n" in recipe + "\n" and "bench." not in recipe


def test_the_runner_refuses_an_unknown_bench_name() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "no_such_bench"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 2 and "no such bench: no_such_bench" in done.stderr
