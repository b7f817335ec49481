"""Fuzz the extender with mutated Node objects: through the watch cache and every verb, nothing may raise.

    python -m tests.fuzz_nodes [--iterations 10000] [--seed 12]

Each iteration takes a captured node, mutates it (annotation values from a list of hostile ones, random
strings, wrong types where the API server would never send them, broken quantities, missing or odd
metadata), and
  - applies it to the cluster cache as a watch event (ADDED, MODIFIED or DELETED), calling the handler
    directly so any exception surfaces here instead of being logged by the reflector;
  - every few iterations, asks filter, prioritize and preempt in names mode, and /nodes, /nodes/{name}
    and /explain; and sends the mutated nodes as a whole-node filter and prioritize.
An answer must be 2xx, or a 400 with the JSON error shape for a whole-node request the scheduler could
never send; a filter answer's ``Error`` must be empty. ``tests/extender/test_bad_annotations.py`` runs it
with few
iterations; the issue's 10 000 is a run of this script.
"""

from __future__ import annotations

import argparse
import copy
import logging
import random
import string
import time
from typing import Any
from urllib.parse import quote

from fastapi.testclient import TestClient

from ballast.contract.annotations import format_timestamp
from ballast.extender.main import create_app
from ballast.kube.client import Kube
from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE
from tests.conftest import CAPTURE_TIME, FIXTURES, read_fixture

METRICS = (
    "cpu_usage_avg_5m",
    "cpu_usage_max_avg_1h",
    "cpu_usage_max_avg_1d",
    "mem_usage_avg_5m",
    "mem_usage_max_avg_1h",
    "mem_usage_max_avg_1d",
    "node_hot_value",
)
STAMPS = (
    format_timestamp(CAPTURE_TIME - 30),
    format_timestamp(CAPTURE_TIME + 10**9),
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z",
    "2026-11-22T07:39:00+14:00",
    "2026-11-22T07:39:00",
    "",
    "garbage",
)
VALUES = (
    "0.5",
    "1e308",
    "-1e308",
    "1e-320",
    "inf",
    "-inf",
    "nan",
    "-0",
    "0",
    "1",
    "10",
    "10.000001",
    "9999",
    "10001",
    "1_0",
    "0x10",
    " 0.3 ",
    "",
)
QUANTITIES = (
    "8",
    "7910m",
    "1e400",
    "-8",
    "0",
    "1Ei",
    "999999999999999999999999Ei",
    "abc",
    "",
    "8.5",
    "1e-400",
)
ODD = (None, 1, 1.5, True, [], {}, [1, 2], {"a": "b"}, "x" * 5000)


def _text(rng: random.Random) -> str:
    n = rng.randint(0, 40)
    return "".join(rng.choice(string.printable) for _ in range(n))


def annotation_value(rng: random.Random) -> Any:
    """One annotation value: mostly ``value,stamp`` shaped, sometimes anything at all."""
    roll = rng.random()
    if roll < 0.6:  # half of them fresh, so the value reaches the filter and score arithmetic
        return f"{rng.choice(VALUES)},{STAMPS[0] if rng.random() < 0.5 else rng.choice(STAMPS)}"
    if roll < 0.8:
        return _text(rng)
    if roll < 0.9:
        return f"{rng.uniform(-2, 20):.5f},{rng.choice(STAMPS)}"
    return rng.choice(ODD)


def mutate(node: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    node = copy.deepcopy(node)
    meta = node.setdefault("metadata", {})
    ann = meta.setdefault("annotations", {})
    for _ in range(rng.randint(1, 4)):
        ann[rng.choice(METRICS)] = annotation_value(rng)
    roll = rng.random()
    if roll < 0.1:
        node.setdefault("status", {})["allocatable"] = {
            "cpu": rng.choice(QUANTITIES + ODD),
            "memory": rng.choice(QUANTITIES + ODD),
        }
    elif roll < 0.13:
        node["status"] = rng.choice(ODD)
    elif roll < 0.16:
        meta["annotations"] = rng.choice(ODD)
    elif roll < 0.18:
        meta["labels"] = rng.choice(ODD)
    elif roll < 0.2:
        meta["resourceVersion"] = rng.choice(ODD)
    meta["resourceVersion"] = (
        str(rng.randint(1, 10**9)) if rng.random() < 0.9 else meta.get("resourceVersion")
    )
    return node


class _ErrorLog(logging.Handler):
    """Errors the extender caught and logged (a guard fired): the fuzz counts them as failures too."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()}")


class Harness:
    """The extender app with a cache fed by hand (no API server) and one without cluster access."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        policy = load_policy(POLICY_FILE)
        self.clock = lambda: CAPTURE_TIME
        self.app = create_app(policy, kube=Kube(None), clock=self.clock, policy_poll_seconds=0)
        self.cache = self.app.state.services.cache
        self.nodes_handler = self.cache.reflectors[0].handler
        self.nodes_handler.replace(copy.deepcopy(nodes), "1")
        self.client = TestClient(self.app)  # no lifespan: the reflectors never start
        self.whole = TestClient(create_app(policy, clock=self.clock, policy_poll_seconds=0))
        bodies = [
            read_fixture(f"full-nodes/{p.name}") for p in sorted((FIXTURES / "full-nodes").glob("*.json"))
        ]
        self.pods = [b["Pod"] for b in bodies if "Pod" in b]
        self.requests = 0
        self.errors = _ErrorLog()
        logging.getLogger("ballast").addHandler(self.errors)

    def apply(self, event: str, node: dict[str, Any]) -> None:
        self.nodes_handler.apply(event, node)

    def _check(self, what: str, r: Any, whole: bool = False, found: bool = True) -> None:
        self.requests += 1
        ok = 200 <= r.status_code < 300 or (whole and r.status_code == 400 and "field" in r.json())
        ok = ok or (not found and r.status_code == 404)  # a name like ".." is no route
        if not ok:
            raise AssertionError(f"{what}: HTTP {r.status_code}: {r.text[:500]}")
        if what.endswith("filter") and r.status_code == 200 and r.json().get("Error"):
            raise AssertionError(f"{what}: Error {r.json()['Error']!r}")
        if what.endswith("/nodes") and any("error" in v for v in r.json()["nodes"]):
            raise AssertionError(f"{what}: a node could not be explained: {r.text[:500]}")
        if self.errors.records:
            raise AssertionError(f"{what}: errors were logged (caught, but a bug): {self.errors.records[:3]}")

    def verbs(self, rng: random.Random, mutated: list[dict[str, Any]]) -> None:
        pod = rng.choice(self.pods)
        names = list(self.cache.node_names())
        names.append("not-a-node")
        body = {"Pod": pod, "NodeNames": names}
        c = self.client
        self._check("names filter", c.post("/filter", json=body))
        self._check("names prioritize", c.post("/prioritize", json=body))
        victims = {n: {"Pods": [], "NumPDBViolations": 0} for n in names}
        self._check("preempt", c.post("/preempt", json={"Pod": pod, "NodeNameToMetaVictims": victims}))
        self._check("/nodes", c.get("/nodes"))
        if names[:-1]:
            self._check(
                "/nodes/{name}", c.get("/nodes/" + quote(rng.choice(names[:-1]), safe="")), found=False
            )
        self._check("/explain", c.post("/explain", json=body))
        whole = {"Pod": pod, "Nodes": {"items": mutated}}
        self._check("whole filter", self.whole.post("/filter", json=whole), whole=True)
        self._check("whole prioritize", self.whole.post("/prioritize", json=whole), whole=True)
        self._check("whole explain", self.whole.post("/explain", json=whole), whole=True)
        self._check("whole /nodes", self.whole.get("/nodes"))


def base_nodes() -> list[dict[str, Any]]:
    nodes: dict[str, dict[str, Any]] = {}
    for f in sorted((FIXTURES / "full-nodes").glob("*.json")):
        for n in (read_fixture(f"full-nodes/{f.name}").get("Nodes") or {}).get("items") or []:
            nodes[n["metadata"]["name"]] = n
    return list(nodes.values())


def run(iterations: int, seed: int = 12, verbs_every: int = 10) -> dict[str, float]:
    """Run the fuzz; raise on the first failure. Returns what it did and how long it took."""
    rng = random.Random(seed)
    base = base_nodes()
    h = Harness(base)
    started = time.monotonic()
    batch: list[dict[str, Any]] = []
    for i in range(iterations):
        node = mutate(rng.choice(base), rng)
        event = rng.choices(("MODIFIED", "ADDED", "DELETED"), (8, 1, 1))[0]
        try:
            h.apply(event, node)
        except Exception as exc:
            raise AssertionError(f"iteration {i}: the cache raised on {event} of {node!r:.1000}") from exc
        if event == "DELETED" and rng.random() < 0.5:
            h.apply("ADDED", rng.choice(base))  # keep the cache from emptying
        batch.append(node)
        if (i + 1) % verbs_every == 0:
            try:
                h.verbs(rng, batch)
            except Exception as exc:
                raise AssertionError(f"iteration {i}: {exc}") from exc
            batch = []
    return {"iterations": iterations, "requests": h.requests, "seconds": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--verbs-every", type=int, default=10)
    args = parser.parse_args()
    print(run(args.iterations, args.seed, args.verbs_every))


if __name__ == "__main__":
    main()
