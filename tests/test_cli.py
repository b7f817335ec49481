from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from ballast.cli import build_parser, main
from ballast.testing.parts import POLICY_FILE


def test_help_explains_every_flag(capsys) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["extender", "--help"])
    out = capsys.readouterr().out
    for flag in (
        "--host",
        "--port",
        "--policy",
        "--policy-poll",
        "--kubeconfig",
        "--resync",
        "--api-timeout",
        "--log-level",
        "--log-format",
    ):
        assert flag in out
    # every option has a help text
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        for action in p._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"ballast {name} {action.option_strings} has no help"


def test_bad_policy_exits_non_zero_with_field_path(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("spec:\n  syncPolicy: [{name: cpu, period: 3m}]\n  priority: [{name: cpu, weight: -2}]\n")
    assert main(["extender", "--policy", str(bad)]) == 2
    assert "spec.priority[0].weight: -2 is out of range: must be at least 0" in capsys.readouterr().err


def test_console_script_runs() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "ballast", "--help"], capture_output=True, text=True, check=True
    )
    assert "extender" in r.stdout


def test_unreadable_kubeconfig_exits_2(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "kubeconfig"
    cfg.write_text("not: [a kubeconfig")
    policy = Path(__file__).resolve().parent.parent / "scheduler_config" / "policy.yaml"
    assert main(["extender", "--policy", str(policy), "--kubeconfig", str(cfg)]) == 2
    assert "cannot load kubeconfig" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "seconds"), [("2s", 2.0), ("1m", 60.0), ("3", 3.0), ("0", 0.0), ("1.5", 1.5)]
)
def test_extender_policy_poll_takes_durations(text: str, seconds: float) -> None:
    args = build_parser().parse_args(["extender", "--policy", "p.yaml", "--policy-poll", text])
    assert args.policy_poll == seconds


def test_extender_duration_defaults_are_seconds() -> None:
    args = build_parser().parse_args(["extender", "--policy", "p.yaml"])
    assert (args.policy_poll, args.resync, args.api_timeout) == (2.0, 300.0, 4.0)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["extender", "--policy", "p.yaml", "--policy-poll", "2 days"])


@pytest.mark.parametrize("command", ["extender", "annotator", "rebalancer", "agent"])
def test_help_shows_each_default_once_and_no_none(command: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ballast", command, "--help"], capture_output=True, text=True, check=True
    ).stdout
    flat = " ".join(out.split())
    assert "(default: None)" not in flat
    assert flat.count("(default: info)") == 1, flat


def test_agent_usage_shows_it_runs_without_a_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ballast", "agent", "--help"], capture_output=True, text=True, check=True
    ).stdout
    first = out.splitlines()[0]
    assert first.startswith("usage: ballast agent [OPTIONS]") and "topology" not in first, out


def test_listening_is_logged_after_the_port_is_bound() -> None:
    """The line names the bound port (here one the OS picked), so it cannot come before the bind."""
    import re
    import socket
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "ballast", "extender", "--policy", str(POLICY_FILE), "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if m := re.search(r"listening on 127\.0\.0\.1:(\d+)", line):
                port = int(m.group(1))
        assert port and port != 0
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_port_in_use_never_says_listening() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "ballast", "extender", "--policy", str(POLICY_FILE), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode != 0
    assert "listening on" not in r.stderr


def _help(*command: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "ballast", *command, "--help"], capture_output=True, text=True, check=True
    ).stdout
    return " ".join(out.split())


def test_agent_topology_usage_is_its_own_command_line() -> None:
    out = _help("agent", "topology")
    assert out.startswith("usage: ballast agent topology [-h] [--sysfs DIR] [--json] "), out


def test_every_flag_with_a_default_shows_it() -> None:
    """A default is shown unless the help says it in words; then it must say the value itself."""
    for command in ("extender", "annotator", "agent"):
        parser = next(a for a in build_parser()._actions if a.dest == "command").choices[command]  # type: ignore[attr-defined]
        flat = _help(command)
        for action in parser._actions:
            if action.default in (None, False, "", [], argparse.SUPPRESS) or not action.option_strings:
                continue
            if isinstance(action.default, str) and action.help:
                shown = f"(default: {action.default})" in flat or action.default in " ".join(
                    action.help.split()
                )
                assert shown, f"ballast {command} {action.option_strings[0]}: its default is not shown"


def test_the_extender_resync_help_names_everything_it_relists() -> None:
    """``--resync`` relists every watch of the node cache (ClusterCache's reflectors)."""
    flat = _help("extender").lower()
    start = flat.rindex("--resync duration")  # in the options, not the usage line
    resync = flat[start : flat.index("--api-timeout duration", start)]
    for watched in ("nodes", "pods", "noderesourcetopologies"):
        assert watched in resync, resync


def test_the_deprecated_quiet_access_flag_starts_the_extender_with_a_warning() -> None:
    """Manifests written before ``--access-log`` pass ``--quiet-access``: the extender must still start
    (quiet is the default now), say once that the flag is deprecated, and not offer it in ``--help``."""
    import re
    import time

    assert "--quiet-access" not in _help("extender")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ballast",
            "extender",
            "--policy",
            str(POLICY_FILE),
            "--port",
            "0",
            "--quiet-access",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("listening on" in line for line in lines):
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
        text = "".join(lines)
        assert re.search(r"listening on 127\.0\.0\.1:\d+", text), text
        warnings = [line for line in lines if "--quiet-access is deprecated" in line]
        assert len(warnings) == 1 and "WARNING" in warnings[0], text
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _flags(command: str, group: str | None = None) -> dict[str, argparse.Action]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    groups = [g for g in parser._action_groups if group is None or g.title == group]
    return {a.option_strings[0]: a for g in groups for a in g._group_actions if a.option_strings}


def test_the_elected_programs_share_one_serving_group_and_the_shared_flags() -> None:
    """The annotator and the rebalancer declare their serving and API flags in one place
    (``ballast.program.flags.add_serving``), and the kubeconfig and policy-poll flags with the agent's and
    each other's:
    the same flags, types, defaults and help, apart from the port, what the endpoint serves and what is
    relisted."""
    annotator = _flags("annotator", "serving and API")
    rebalancer = _flags("rebalancer", "serving and API")
    shared = ["--metrics-port", "--metrics-address", "--api-timeout", "--watch-stall-timeout", "--resync"]
    assert list(rebalancer) == shared
    assert list(annotator) == [*shared, "--patch-concurrency"]
    for flag in ("--metrics-address", "--api-timeout", "--watch-stall-timeout"):
        a, r = annotator[flag], rebalancer[flag]
        assert (a.type, a.default, a.help) == (r.type, r.default, r.help), flag
    assert (annotator["--metrics-port"].default, rebalancer["--metrics-port"].default) == (8090, 8092)
    everywhere = {name: _flags(name) for name in ("annotator", "rebalancer", "agent")}
    kubeconfig = {f["--kubeconfig"].help for f in everywhere.values()}
    assert len(kubeconfig) == 1
    poll = {
        (f["--policy-poll"].type, f["--policy-poll"].default) for n, f in everywhere.items() if n != "agent"
    }
    assert len(poll) == 1
