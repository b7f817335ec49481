"""Shared fixtures: the bundled policy, the captured kube-scheduler requests, a pinned clock."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ballast.model.policy import Policy, load_policy
from ballast.testing.parts import POLICY_FILE, ROOT, under_ci


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


pytest_plugins = ["ballast.testing.fakekube.pytest_plugin"]
