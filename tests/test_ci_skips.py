"""CI's promise that every test ran: under ``CI=true`` a skip is a failure (``tests/conftest.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ballast.testing.parts import ROOT

BODY = """
import pytest
from ballast.testing.parts import missing_part

def test_skips_by_itself():
    pytest.skip("some library decided so")

def test_misses_a_part():
    missing_part("prometheus not found")

def test_runs():
    assert True
"""


def run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(BODY)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("ci", [None, "false"])
def test_a_users_machine_skips_with_the_reason(tmp_path: Path, ci: str | None) -> None:
    out = run(tmp_path, ci)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed, 2 skipped" in out.stdout


def test_under_ci_every_skip_fails(tmp_path: Path) -> None:
    out = run(tmp_path, "true")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "2 failed, 1 passed" in out.stdout
    assert "this test must run, not skip" in out.stdout
    assert "skipped under CI=true" in out.stdout
