"""Where the repository is, and how a test meets a missing real part or waits for a condition: shared by
``tests/`` and ``bench/`` (and the harnesses here)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
