"""``ballast agent`` and ``ballast agent topology`` through an argparse parser of our own."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from ballast.agent.cli import COMMAND, show_topology
from tests.agent.sysfs_fixtures import NO_NODE_DIR, TWO_SOCKETS_HT, write_sysfs

GiB = 2**30


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ballast")
    COMMAND.register(p.add_subparsers(dest="command", required=True))
    return p


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


def test_topology_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT)
    assert run(["agent", "topology", "--sysfs", str(root), "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == {
        "cpus": [
            {"cpu": cpu, "core": cpu % 8, "socket": cpu % 8 // 4, "numa": cpu % 8 // 4} for cpu in range(16)
        ],
        "numa_nodes": [
            {"id": 0, "cpus": "0-3,8-11", "memory_bytes": 32 * GiB, "distances": {"0": 10, "1": 21}},
            {"id": 1, "cpus": "4-7,12-15", "memory_bytes": 32 * GiB, "distances": {"0": 21, "1": 10}},
        ],
    }
    assert out.startswith('{"cpus": [{"cpu": 0, "core": 0, "socket": 0, "numa": 0}, ')


def test_topology_json_without_numa_information(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_sysfs(tmp_path / "sys", NO_NODE_DIR)
    assert run(["agent", "topology", "--sysfs", str(root), "--json"]) == 0
    nodes = json.loads(capsys.readouterr().out)["numa_nodes"]
    assert nodes == [{"id": 0, "cpus": "0-3", "memory_bytes": None, "distances": {}}]


def test_topology_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT)
    assert run(["agent", "topology", "--sysfs", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "16 CPUs, 8 cores, 2 socket(s), 2 NUMA node(s), 2 CPU(s) per core"
    assert lines[3].split() == ["0", "0-3,8-11", "32.0", "GiB", "0:10", "1:21"]
    assert lines[4].split() == ["1", "4-7,12-15", "32.0", "GiB", "0:21", "1:10"]
    assert lines[6].split() == ["CPU", "CORE", "SOCKET", "NUMA"]
    assert lines[7 + 13].split() == ["13", "5", "1", "1"]


def test_sysfs_given_before_the_subcommand_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_sysfs(tmp_path / "sys", NO_NODE_DIR)
    assert run(["agent", "--sysfs", str(root), "topology", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["cpus"]) == 4


def test_topology_error_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["agent", "topology", "--sysfs", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "ballast agent topology:" in err
    assert str(tmp_path / "devices" / "system" / "cpu" / "online") in err


def test_run_mode_parses_its_flags() -> None:
    args = parser().parse_args(
        [
            "agent",
            "--node-name",
            "worker-1",
            "--kubeconfig",
            "kc",
            "--kubelet-config",
            "k.yaml",
            "--resync",
            "1m",
        ]
    )
    assert args.func == COMMAND.start
    assert (args.node_name, args.kubeconfig, args.kubelet_config, args.resync) == (
        "worker-1",
        "kc",
        Path("k.yaml"),
        60.0,
    )
    assert args.sysfs == Path("/sys")
    assert parser().parse_args(["agent", "topology"]).func is show_topology


def test_default_resync_is_ten_seconds() -> None:
    assert parser().parse_args(["agent"]).resync == 10.0


@pytest.mark.parametrize("bad", ["0s", "soon", "-1s"])
def test_bad_resync_is_refused(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["agent", "--resync", bad])
    assert "--resync" in capsys.readouterr().err


def test_run_mode_needs_a_node_name(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert run(["agent"]) == 2
    assert "NODE_NAME" in capsys.readouterr().err


def test_every_flag_has_help() -> None:
    p = parser()
    agent = p._subparsers._group_actions[0].choices["agent"]  # type: ignore[union-attr]
    topology = agent._subparsers._group_actions[0].choices["topology"]  # type: ignore[union-attr]
    flags = 0
    for sub in (agent, topology):
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{action.option_strings} has no help"
                flags += 1
    assert flags >= 9


def test_the_pod_watch_takes_the_watch_stall_timeout() -> None:
    """``--watch-stall-timeout``, as in the other programs: the agent's watch on its node's pods counts as
    stalled after that much silence (2m unless set)."""
    from ballast.agent.pod_watch import NodePodWatch
    from ballast.kube.client import WATCH_STALL_SECONDS

    base = ["agent", "--node-name", "worker-1", "--kubeconfig", "kc"]
    assert parser().parse_args(base).watch_stall_timeout == WATCH_STALL_SECONDS == 120.0
    args = parser().parse_args([*base, "--watch-stall-timeout", "45s"])
    assert args.watch_stall_timeout == 45.0
    watch = NodePodWatch(object(), "worker-1", stall_seconds=args.watch_stall_timeout)
    assert watch.new_reflector().stall_seconds == 45.0
    with pytest.raises(SystemExit):
        parser().parse_args([*base, "--watch-stall-timeout", "0s"])
