"""The public surface does not drift by accident: every command's ``--help`` (flags, defaults, help text),
the name and type of every metric each program exports (and of every family the extender's ``/metrics``
serves), and the extender's OpenAPI document are compared with the copies in ``tests/fixtures/surface/``.
A deliberate change updates the copy in the same commit: ``.venv/bin/python -m tests.test_surface
--write`` writes them anew."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from ballast.agent.cpumanager.metrics import CPUManagerMetrics
from ballast.agent.load.metrics import LoadMetrics
from ballast.agent.nrt.publisher import PublisherMetrics
from ballast.annotator.metrics import AnnotatorMetrics
from ballast.extender.main import create_app
from ballast.extender.metrics import ExtenderMetrics
from ballast.model.policy import load_policy
from ballast.rebalancer.metrics import RebalancerMetrics

ROOT = Path(__file__).resolve().parent.parent
SURFACE = ROOT / "tests" / "fixtures" / "surface"
POLICY_FILE = ROOT / "scheduler_config" / "policy.yaml"
COMMANDS = (
    (),
    ("extender",),
    ("annotator",),
    ("rebalancer",),
    ("agent",),
    ("agent", "topology"),
)


def help_text(command: tuple[str, ...]) -> str:
    """``ballast <command> --help`` as a user sees it in a 100-column terminal."""
    env = {**os.environ, "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-m", "ballast", *command, "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return done.stdout


def metric_names() -> dict[str, list[str]]:
    """Each program's metric families as ``<name> <type>``, sorted."""
    agent = CollectorRegistry()
    CPUManagerMetrics(agent)
    PublisherMetrics(agent)
    LoadMetrics(agent)
    registries = {
        "extender": ExtenderMetrics().registry,
        "annotator": AnnotatorMetrics().registry,
        "rebalancer": RebalancerMetrics().registry,
        "agent": agent,
    }
    return {
        program: sorted(f"{family.name} {family.type}" for family in registry.collect())
        for program, registry in registries.items()
    }


def extender_scrape() -> list[str]:
    """The metric families the extender's own ``/metrics`` serves, as a scraper reads them."""
    with TestClient(create_app(load_policy(POLICY_FILE))) as client:
        text = client.get("/metrics").text
    return sorted({f"{family.name} {family.type}" for family in text_string_to_metric_families(text)})


def openapi() -> dict:
    """The OpenAPI document, with the examples' stamps (made at start, to be fresh) as one placeholder."""
    text = json.dumps(create_app(load_policy(POLICY_FILE)).openapi())
    return json.loads(re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "<now>", text))


def current() -> dict[str, str]:
    """File name in ``SURFACE`` -> its content now."""
    files = {f"help-{'-'.join(c) or 'ballast'}.txt": help_text(c) for c in COMMANDS}
    files["metrics.json"] = json.dumps(metric_names(), indent=1, sort_keys=True) + "\n"
    files["extender-scrape.json"] = json.dumps(extender_scrape(), indent=1) + "\n"
    files["openapi.json"] = json.dumps(openapi(), indent=1, sort_keys=True) + "\n"
    return files


@pytest.fixture(scope="module")
def surface() -> dict[str, str]:
    return current()


@pytest.mark.parametrize("name", [f"help-{'-'.join(c) or 'ballast'}.txt" for c in COMMANDS])
def test_every_command_s_help_is_unchanged(surface: dict[str, str], name: str) -> None:
    assert surface[name] == (SURFACE / name).read_text()


def test_every_metric_name_and_type_is_unchanged(surface: dict[str, str]) -> None:
    assert json.loads(surface["metrics.json"]) == json.loads((SURFACE / "metrics.json").read_text())


def test_the_extender_s_metrics_endpoint_serves_the_same_families(surface: dict[str, str]) -> None:
    assert json.loads(surface["extender-scrape.json"]) == json.loads(
        (SURFACE / "extender-scrape.json").read_text()
    )


def test_the_openapi_document_is_unchanged(surface: dict[str, str]) -> None:
    assert json.loads(surface["openapi.json"]) == json.loads((SURFACE / "openapi.json").read_text())


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_surface --write")
    SURFACE.mkdir(parents=True, exist_ok=True)
    for name, text in current().items():
        (SURFACE / name).write_text(text)
        print(f"wrote {SURFACE / name}")
