from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import build_parser, main


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
        [sys.executable, "-m", "app.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "extender" in r.stdout


def test_unreadable_kubeconfig_exits_2(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "kubeconfig"
    cfg.write_text("not: [a kubeconfig")
    policy = Path(__file__).resolve().parent.parent / "scheduler_config" / "policy.yaml"
    assert main(["extender", "--policy", str(policy), "--kubeconfig", str(cfg)]) == 2
    assert "cannot load kubeconfig" in capsys.readouterr().err
