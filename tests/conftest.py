"""Shared fixtures: the bundled policy, the captured kube-scheduler requests, a pinned clock."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import pytest

from app.model.policy import Policy, load_policy

ROOT = Path(__file__).resolve().parent.parent
POLICY_FILE = ROOT / "scheduler_config" / "policy.yaml"


def wait_for(
    condition: Callable[[], Any], timeout: float = 5.0, what: str = "condition", interval: float = 0.01
) -> Any:
    """Poll ``condition`` until it is truthy and return its value; fail naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing_part(reason: str) -> NoReturn:
    """A real part this test needs (a server, a binary, a browser) is missing: skip with the reason on a
    user's machine, fail under ``CI=true``, where ``.ci/run`` installs every part and a skip would hide
    a test that never ran."""
    if under_ci():
        pytest.fail(f"{reason} (CI=true: this test must run, not skip)")
    pytest.skip(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """Under ``CI=true`` any skip is a failure, whoever skipped (a marker, a library, a new test that
    forgot ``missing_part``): CI promises that every test ran."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and under_ci() and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true: {report.longrepr}"


FIXTURES = ROOT / "tests" / "fixtures" / "kube-scheduler"
"""Request bodies a real kube-scheduler v1.36.2 sent to an extender (see the README beside them)."""
CAPTURE_TIME = datetime(2026, 11, 22, 7, 39, 30, tzinfo=UTC).timestamp()
"""The fixtures were captured between 07:38 and 07:40 UTC; their annotations are fresh at this time."""


def fixture_files(mode: str | None = None) -> list[Path]:
    dirs = [FIXTURES / mode] if mode else [FIXTURES / "full-nodes", FIXTURES / "node-names"]
    return sorted(p for d in dirs for p in d.glob("*.json"))


def read_fixture(rel: str) -> dict:
    return json.loads((FIXTURES / rel).read_text())


@pytest.fixture
def policy() -> Policy:
    return load_policy(POLICY_FILE)


pytest_plugins = ["tests.fakekube.pytest_plugin"]
