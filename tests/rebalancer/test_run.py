"""The program around the pure cycle: flags and refusals, ``--once --dry-run --json``, the cycle's API
handling (429, failures, partial data) with a recording double, and run mode against the fake API server
(watches, ``/readyz`` on a refused reload, ``/rebalance``). Evictions against the real API server, PDBs
and ReplicaSets are in ``tests/cluster/test_rebalancer_e2e.py``."""

from __future__ import annotations

import argparse
import io
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from ballast.cli import main
from ballast.kube.client import ApiError
from ballast.rebalancer.cache import NodeCache, PodCache
from ballast.rebalancer.cli import COMMAND
from ballast.rebalancer.evictor import Evictor
from ballast.rebalancer.metrics import RebalancerMetrics
from ballast.rebalancer.run import Rebalancer, run
from ballast.testing.fakekube import FakeKube
from ballast.testing.parts import wait_for
from ballast.testing.prometheus import free_port
from tests.rebalancer.helpers import BASE, NOW, node, pod, policy


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ballast")
    COMMAND.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["rebalancer", *argv])


def policy_file(tmp_path: Path, **rebalance: Any) -> Path:
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    if rebalance.pop("absent", False):
        del doc["spec"]["rebalance"]
    else:
        doc["spec"]["rebalance"].update(rebalance)
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_bad_rebalance_section_exits_2_with_the_field_path(tmp_path: Path, capsys) -> None:
    bad = policy_file(tmp_path, thresholds=[{"name": "cpu_usage_avg_5m", "high": 0.4, "low": 0.6}])
    assert main(["rebalancer", "--policy", str(bad)]) == 2
    assert "spec.rebalance.thresholds[0].low: 0.6 must be below high 0.4" in capsys.readouterr().err


def test_json_is_for_once_and_no_cluster_is_a_configuration_error(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    good = policy_file(tmp_path)
    assert main(["rebalancer", "--policy", str(good), "--json"]) == 2
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["rebalancer", "--policy", str(good), "--once"]) == 2


# --- the cycle's API handling, with a recording double ------------------------------------------------


class Calls:
    """A ``Kube`` double: records creates (an Event gets a name, and merge patches change it);
    ``answers`` maps a path suffix to an ApiError to raise."""

    def __init__(self, answers: dict[str, ApiError] | None = None) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []
        self.answers = answers or {}
        self.order: list[str] = []
        """Every call: ``eviction`` or ``event`` (create) or ``patch``."""

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        for suffix, err in self.answers.items():
            if path.endswith(suffix):
                raise err
        body = json.loads(json.dumps(body))
        if path.endswith("/events"):
            body["metadata"]["name"] = f"ev{len(self.created)}"
        self.created.append((path, body))
        self.order.append("eviction" if path.endswith("/eviction") else "event")
        return body

    def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        name = path.rsplit("/", 1)[1]
        (body,) = [b for p, b in self.created if b.get("metadata", {}).get("name") == name]
        body.update(patch)
        self.order.append("patch")
        return body

    def evictions(self) -> list[str]:
        return [p for p, _ in self.created if p.endswith("/eviction")]

    def events(self) -> list[dict[str, Any]]:
        return [b for p, b in self.created if p.endswith("/events")]


def rebalancer(kube: Calls, *, dry_run: bool = False, blocked: str | None = None, **rebalance: Any):
    p, _ = policy(consecutiveAbnormal=1, **rebalance)
    nodes, pods = NodeCache(lambda: p, clock=lambda: NOW), PodCache(lambda: p)
    nodes.replace([node("hot", 0.99), node("cool", 0.10)], "1")
    pods.replace([pod(f"p{i}", "hot", cpu="500m", owner_name=f"o{i}") for i in range(3)], "1")
    metrics = RebalancerMetrics()
    ev = Evictor(kube, dry_run=dry_run, clock=lambda: NOW)  # type: ignore[arg-type]
    r = Rebalancer(lambda: p, nodes, pods, ev, metrics, blocked=lambda: blocked, clock=lambda: NOW + 1,
                   sleep=lambda s: None)  # fmt: skip
    return r, metrics


def count(metrics: RebalancerMetrics, result: str, dry: str = "false") -> float:
    return metrics.evictions.labels(result, dry)._value.get()


def test_evictions_go_through_the_eviction_api_with_the_uid_and_leave_events() -> None:
    kube = Calls()
    r, metrics = rebalancer(kube)
    plan = r.cycle()
    assert plan is not None and len(plan.evictions) == 2  # the per-node limit
    assert len(kube.evictions()) == 2
    # the Event that remembers the call is written before it, then turned into the outcome
    assert kube.order == ["event", "eviction", "patch"] * 2
    (path, body) = next((p, b) for p, b in kube.created if p.endswith("/eviction"))
    assert path.startswith("/api/v1/namespaces/default/pods/p") and path.endswith("/eviction")
    assert body["apiVersion"] == "policy/v1" and body["kind"] == "Eviction"
    assert body["deleteOptions"]["preconditions"]["uid"].startswith("uid-p")
    (event, _) = kube.events()
    assert event["reason"] == "Rebalanced" and event["involvedObject"]["kind"] == "Pod"
    assert event["message"] == (
        "evicted: cpu_usage_avg_5m 0.99 > high 0.80 for 1 cycles; usage estimated (cpu 425m, memory 179Mi); "
        "fits on cool"
    )
    record = json.loads(event["metadata"]["annotations"]["ballast.io/rebalance"])
    assert record == {"node": "hot", "workload": "default/ReplicaSet/o0", "at": NOW, "dryRun": False}
    assert count(metrics, "evicted") == 2 and count(metrics, "limited") == 1


PDB_REFUSAL = {  # kube-apiserver v1.36's answer, as read in tests/cluster/test_rebalance_safety.py
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 429,
    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
    "reason": "TooManyRequests",
    "details": {"causes": [{"reason": "DisruptionBudget",
                            "message": "The disruption budget db needs 1 healthy pods and has 1 currently"}]},
}  # fmt: skip


def test_a_429_is_not_now_and_is_never_forced() -> None:
    refusal = str(PDB_REFUSAL["message"])
    kube = Calls({"/eviction": ApiError(429, "TooManyRequests", refusal, PDB_REFUSAL)})
    r, metrics = rebalancer(kube)
    plan = r.cycle()
    assert plan is not None and [c.result for c in plan.evictions] == ["pdb_blocked", "pdb_blocked"]
    assert count(metrics, "pdb_blocked") == 2 and count(metrics, "evicted") == 0
    assert [e["reason"] for e in kube.events()] == ["RebalanceBlocked", "RebalanceBlocked"]
    # nothing was recorded as done: the next cycle tries again, the node is not waiting for data
    again = r.cycle()
    assert again is not None and len(again.evictions) == 2 and count(metrics, "pdb_blocked") == 4


def test_a_throttling_429_is_told_apart_from_a_pdb_and_its_retry_after_is_honoured() -> None:
    # priority and fairness: a plain-text 429 with Retry-After, no Status, no budget named
    kube = Calls({"/eviction": ApiError(429, "Too Many Requests", "Too many requests", retry_after="7")})
    r, metrics = rebalancer(kube)
    slept: list[float] = []
    r.sleep = slept.append
    plan = r.cycle()
    assert plan is not None and plan.evictions[0].result == "throttled"
    assert plan.evictions[1].result.startswith("not attempted")
    assert count(metrics, "throttled") == 1 and count(metrics, "pdb_blocked") == 0
    assert [e["reason"] for e in kube.events()] == ["RebalanceThrottled"]
    kube.answers.clear()
    r.cycle()
    assert 6.0 < slept[0] <= 7.0  # no eviction call before Retry-After
    assert len(kube.evictions()) == 2


def test_a_definite_refusal_stops_the_cycle_and_partial_data_aborts_before_any_eviction() -> None:
    kube = Calls({"/eviction": ApiError(403, "Forbidden", "no RBAC for pods/eviction")})
    r, metrics = rebalancer(kube)
    plan = r.cycle()
    assert plan is not None
    assert plan.evictions[0].result == "error"
    assert plan.evictions[1].result.startswith("not attempted")
    assert [e["reason"] for e in kube.events()] == ["RebalanceFailed"]
    assert metrics.cycles.labels("aborted")._value.get() == 1
    quiet = Calls()
    r, metrics = rebalancer(quiet, blocked="the pods watch is down (connection refused)")
    assert r.cycle() is None and quiet.created == []
    assert "aborted before any eviction: the pods watch is down" in r.last_note


def test_a_dry_run_calls_no_eviction_and_still_explains() -> None:
    kube = Calls()
    r, metrics = rebalancer(kube, dry_run=True)
    plan = r.cycle()
    assert plan is not None and len(plan.evictions) == 2
    assert kube.evictions() == []
    assert [e["reason"] for e in kube.events()] == ["RebalanceDryRun"] * 2
    assert kube.events()[0]["message"].startswith("dry run, would evict: cpu_usage_avg_5m 0.99")
    assert count(metrics, "evicted", "true") == 2
    # as after a real eviction, the node now waits for a newer measurement
    again = r.cycle()
    assert again is not None and again.evictions == []
    assert "waiting for a measurement newer" in again.nodes[0].status


# --- against the fake API server ------------------------------------------------------------------------


def seed(fake: FakeKube) -> None:
    now = time.time()
    for n in (node("hot", 0.99, at=now - 10), node("cool", 0.10, at=now - 10)):
        n["apiVersion"], n["kind"] = "v1", "Node"
        fake.add(n)
    for i in range(2):
        p = pod(f"web-{i}", "hot", cpu="500m", owner_name=f"web-{i}")
        p["apiVersion"], p["kind"] = "v1", "Pod"
        fake.add(p)


def test_once_dry_run_json(fake_kube: FakeKube, kubeconfig: Path, tmp_path: Path) -> None:
    seed(fake_kube)
    out = io.StringIO()
    path = policy_file(tmp_path, consecutiveAbnormal=1)
    args = parse("--policy", str(path), "--kubeconfig", str(kubeconfig), "--once", "--dry-run", "--json")
    assert run(args, out=out) == 0
    view = json.loads(out.getvalue())
    assert view["dryRun"] is True and view["settings"]["consecutiveAbnormal"] == 1
    cycle = view["lastCycle"]
    assert cycle["nodes"] == {"cool": 1, "hot": 1}
    assert [e["target"] for e in cycle["evictions"]] == ["cool", "cool"]
    (hot,) = cycle["watched"]
    assert hot["node"] == "hot" and hot["consecutiveAbnormal"] == 1
    assert {c["outcome"] for c in hot["candidates"]} == {"evict"}
    assert not fake_kube.find_requests("POST", "/eviction")
    assert len(fake_kube.list("events")) == 2


def test_once_with_the_default_count_waits_and_says_so(
    fake_kube: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    seed(fake_kube)
    out = io.StringIO()
    args = parse(
        "--policy", str(policy_file(tmp_path)), "--kubeconfig", str(kubeconfig), "--once", "--dry-run"
    )
    assert run(args, out=out) == 0
    assert "hot: hot" in out.getvalue() and "waiting: hot for 1 of 3 cycles" in out.getvalue()
    assert fake_kube.list("events") == []


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except urllib.error.URLError:
        return 0, "not serving yet"


def test_run_mode_watches_reloads_and_reports(fake_kube: FakeKube, kubeconfig: Path, tmp_path: Path) -> None:
    seed(fake_kube)
    path = policy_file(tmp_path, consecutiveAbnormal=2)
    port = free_port()
    args = parse("--policy", str(path), "--kubeconfig", str(kubeconfig), "--interval", "200ms", "--dry-run",
                 "--metrics-port", str(port), "--metrics-address", "127.0.0.1", "--policy-poll", "100ms",
                 "--lease-namespace", "default")  # fmt: skip
    stop = threading.Event()
    code: list[int] = []
    thread = threading.Thread(target=lambda: code.append(run(args, stop=stop)), daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: get(f"{base}/readyz")[0] == 200, 20, "ready")
        # two hot cycles, then the (dry) evictions: from the watch, no list per cycle
        wait_for(lambda: len(fake_kube.list("events")) == 2, 20, "two dry-run events")
        lists = len(fake_kube.find_requests("GET", "/api/v1/pods", watch=False))
        view = json.loads(get(f"{base}/rebalance")[1])
        assert view["leader"] is True and view["watched"] == {"nodes": 2, "pods": 2, "nodeLoads": 0}
        time.sleep(0.6)
        assert len(fake_kube.find_requests("GET", "/api/v1/pods", watch=False)) == lists == 1
        # a bad reload is refused with the field path; the last good policy keeps running
        path.write_text(path.read_text().replace("high: 0.8", "high: 1.8"))
        wait_for(lambda: get(f"{base}/readyz")[0] == 503, 20, "readyz 503")
        assert "spec.rebalance.thresholds[0].high" in get(f"{base}/readyz")[1]
        assert json.loads(get(f"{base}/rebalance")[1])["settings"]["thresholds"][0]["high"] == 0.8
        # no spec.rebalance: idle, and /readyz says so
        policy_file(tmp_path, absent=True)
        wait_for(lambda: "idle" in get(f"{base}/readyz")[1], 20, "idle")
        assert get(f"{base}/readyz")[0] == 200
        assert "ballast_rebalancer_cycles_total" in get(f"{base}/metrics")[1]
    finally:
        stop.set()
        thread.join(15)
    assert code == [0]


def test_a_watch_that_is_down_aborts_cycles_before_any_eviction(
    fake_kube: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    seed(fake_kube)
    fake_kube.patch("nodes", "hot", {"metadata": {"annotations": {"cpu_usage_avg_5m": f"0.5,{stamp()}"}}})
    port = free_port()
    path = policy_file(tmp_path, consecutiveAbnormal=1)
    args = parse("--policy", str(path), "--kubeconfig", str(kubeconfig), "--interval", "100ms",
                 "--metrics-port", str(port), "--metrics-address", "127.0.0.1",
                 "--no-leader-elect")  # fmt: skip
    stop = threading.Event()
    thread = threading.Thread(target=lambda: run(args, stop=stop), daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: get(f"{base}/readyz")[0] == 200, 20, "ready")
        # the pods watch goes down (and stays down), then the node turns hot
        fake_kube.fail_next("GET", "^/api/v1/pods$", 500, count=None)
        assert fake_kube.drop_watches("pods") >= 1
        wait_for(lambda: "the pods watch is down" in json.loads(get(f"{base}/rebalance")[1])["note"], 20,
                 "cycles aborted")  # fmt: skip
        fake_kube.patch(
            "nodes", "hot", {"metadata": {"annotations": {"cpu_usage_avg_5m": f"0.99,{stamp()}"}}}
        )
        time.sleep(1.0)
        assert not fake_kube.find_requests("POST", "/eviction")
        assert "aborted before any eviction" in json.loads(get(f"{base}/rebalance")[1])["note"]
        # back up: the next cycle acts
        fake_kube.clear_injections()
        wait_for(
            lambda: fake_kube.find_requests("POST", "/eviction"), 30, "an eviction once the watch is back"
        )
    finally:
        stop.set()
        thread.join(15)


def stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def test_two_replicas_only_the_lease_holder_acts(
    fake_kube: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    seed(fake_kube)
    path = policy_file(tmp_path, consecutiveAbnormal=1)
    stops, threads, ports = [], [], []
    for name in ("one", "two"):
        port = free_port()
        args = parse("--policy", str(path), "--kubeconfig", str(kubeconfig), "--interval", "100ms",
                     "--dry-run", "--metrics-port", str(port), "--metrics-address", "127.0.0.1",
                     "--identity", name, "--lease-namespace", "default", "--lease-duration", "2s",
                     "--renew-deadline", "1500ms", "--retry-period", "250ms")  # fmt: skip
        stop = threading.Event()
        thread = threading.Thread(target=lambda a=args, s=stop: run(a, stop=s), daemon=True)
        thread.start()
        stops.append(stop)
        threads.append(thread)
        ports.append(port)
    try:
        wait_for(lambda: len(fake_kube.list("events")) >= 2, 20, "the leader's dry-run events")
        time.sleep(0.5)
        views = [json.loads(get(f"http://127.0.0.1:{p}/rebalance")[1]) for p in ports]
        leaders = [v["identity"] for v in views if v["leader"]]
        assert len(leaders) == 1
        (standby,) = [v for v in views if not v["leader"]]
        assert standby["note"].startswith("standby") and standby["lastCycle"] is None
        assert {e["reportingInstance"] for e in fake_kube.list("events")} == set(leaders)
    finally:
        for stop in stops:
            stop.set()
        for thread in threads:
            thread.join(15)


def test_an_eviction_whose_answer_is_lost_counts_until_the_pod_is_seen_unchanged() -> None:
    # perWorkload 1: the API server may have evicted p0 (it answered 500); p1 and p2 are the same workload
    kube = Calls({"/eviction": ApiError(500, "InternalError", "etcdserver: request timed out")})
    p, _ = policy(consecutiveAbnormal=1, perWorkload=1, workloadWindow="10m")
    nodes, pods = NodeCache(lambda: p, clock=lambda: NOW), PodCache(lambda: p)
    nodes.replace([node("hot", 0.99), node("cool", 0.10)], "1")
    pods.replace([pod(f"p{i}", "hot", cpu="500m") for i in range(3)], "1")
    metrics = RebalancerMetrics()
    clock = [NOW + 1]
    ev = Evictor(kube, dry_run=False, clock=lambda: clock[0])  # type: ignore[arg-type]
    r = Rebalancer(lambda: p, nodes, pods, ev, metrics, clock=lambda: clock[0], sleep=lambda s: None)
    plan = r.cycle()
    assert plan is not None and [c.result for c in plan.evictions] == ["unknown"]
    assert count(metrics, "unknown") == 1 and count(metrics, "error") == 0
    (event,) = kube.events()
    assert event["reason"] == "RebalanceUnknown" and "counted as an eviction" in event["message"]
    # counted as done: the node waits for a newer measurement ...
    kube.answers.clear()
    clock[0] += 2
    again = r.cycle()
    assert again is not None and again.evictions == [] and kube.evictions() == []
    assert "waiting for a measurement newer" in again.nodes[0].status
    # ... and once one arrives, still hot, the workload's window holds
    nodes.replace([node("hot", 0.99, at=NOW + 5), node("cool", 0.10)], "2")
    clock[0] += 5
    third = r.cycle()
    assert third is not None and third.evictions == [] and kube.evictions() == []
    assert all(c.outcome in ("limited", "skipped") for c in third.nodes[0].candidates)
    # seen unchanged (same UID, not terminating, same node) once the call cannot still take effect:
    # it did not evict, and stops counting
    clock[0] = NOW + 1 + 61
    nodes.replace([node("hot", 0.99, at=clock[0] - 1), node("cool", 0.10, at=clock[0] - 1)], "3")
    fourth = r.cycle()
    assert fourth is not None and len(fourth.evictions) == 1 and len(kube.evictions()) == 1


def test_an_unknown_outcome_stays_counted_while_the_pod_is_terminating() -> None:
    kube = Calls({"/eviction": ApiError(0, "Unavailable", "POST ...: ProtocolError: connection reset")})
    p, _ = policy(consecutiveAbnormal=1, perWorkload=1, workloadWindow="10m")
    nodes, pods = NodeCache(lambda: p, clock=lambda: NOW), PodCache(lambda: p)
    nodes.replace([node("hot", 0.99), node("cool", 0.10)], "1")
    pods.replace([pod(f"p{i}", "hot", cpu="500m") for i in range(3)], "1")
    clock = [NOW + 1]
    ev = Evictor(kube, dry_run=False, clock=lambda: clock[0])  # type: ignore[arg-type]
    r = Rebalancer(lambda: p, nodes, pods, ev, RebalancerMetrics(), clock=lambda: clock[0],
                   sleep=lambda s: None)  # fmt: skip
    (choice,) = r.cycle().evictions  # type: ignore[union-attr]
    assert choice.result == "unknown"
    kube.answers.clear()
    # the eviction did happen: the pod is terminating
    gone = pod(choice.pod.name, "hot", cpu="500m")
    gone["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    pods.apply("MODIFIED", gone)
    clock[0] = NOW + 1 + 120
    nodes.replace([node("hot", 0.99, at=clock[0] - 1), node("cool", 0.10, at=clock[0] - 1)], "2")
    later = r.cycle()
    assert later is not None and later.evictions == [] and kube.evictions() == []


def predecessor_event(uid: str, reason: str, age: float, server_now: float) -> dict[str, Any]:
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(server_now - age))
    record = {"node": "hot", "workload": "default/ReplicaSet/o0", "at": NOW - age, "dryRun": False}
    return {
        "metadata": {
            "creationTimestamp": created,
            "annotations": {"ballast.io/rebalance": json.dumps(record)},
        },
        "involvedObject": {"kind": "Pod", "uid": uid, "namespace": "default", "name": "gone"},
        "reason": reason,
        "source": {"component": "ballast-rebalancer"},
    }


def test_a_new_leader_keeps_the_pace_window_and_node_wait_of_its_predecessor() -> None:
    server_now = 1_700_000_000.0  # the API server's clock, unrelated to this replica's
    kube = Calls()
    r, _ = rebalancer(kube, perWorkload=1, workloadWindow="10m", evictionsPerSecond=0.1)
    # the previous leader evicted a pod of workload o0 from "hot" 3 s ago, on its clock NOW - 3
    r.events = lambda: ([predecessor_event("uid-gone", "Rebalanced", 3, server_now)], server_now)
    slept: list[float] = []
    r.sleep = slept.append
    plan = r.cycle()
    # the node waits for a measurement newer than the predecessor's eviction (node "hot" measured at NOW - 30)
    assert plan is not None and plan.evictions == [] and kube.evictions() == []
    assert "waiting for a measurement newer" in plan.nodes[0].status
    # a newer measurement: o0 is still inside its window; the others go, no sooner than the pace allows
    r.nodes.replace([node("hot", 0.99, at=NOW + 1), node("cool", 0.10)], "2")
    plan = r.cycle()
    assert plan is not None and {c.pod.workload for c in plan.evictions} == {
        "default/ReplicaSet/o1",
        "default/ReplicaSet/o2",
    }
    assert any(
        c.outcome == "limited" and c.pod.workload == "default/ReplicaSet/o0" for c in plan.nodes[0].candidates
    )
    # 10 s between calls: the first waited what was left after the predecessor's (at least 10 - 3 - 1 s)
    assert slept and slept[0] >= 5.9


def test_a_new_leader_that_cannot_read_the_events_does_not_act() -> None:
    kube = Calls()
    r, _ = rebalancer(kube)

    def unreadable() -> tuple[list[Any], float]:
        raise ApiError(403, "Forbidden", "cannot list events")

    r.events = unreadable
    assert r.cycle() is None and kube.created == []
    assert "previous leader's promises" in r.last_note
    r.events = lambda: ([], NOW)
    plan = r.cycle()
    assert plan is not None and len(kube.evictions()) == 2


def test_no_eviction_call_without_leadership_confirmed_right_before_it() -> None:
    # the Lease read back says no: nothing is written, nothing is called
    kube = Calls()
    r, _ = rebalancer(kube)
    r.confirm = lambda: False
    plan = r.cycle()
    assert plan is not None and all(c.result.startswith("not attempted") for c in plan.evictions)
    assert kube.created == [] and "leadership not confirmed" in r.last_note
    # the read-back says yes, but the renew deadline passes while the Event is written: the call is not made
    kube = Calls()
    r, _ = rebalancer(kube)
    answers = iter([True, False])  # the check after the pace sleep, then the one right before the call
    r.may_act = lambda: next(answers)
    r.confirm = lambda: True
    r.cycle()
    assert kube.evictions() == []
    assert [e["reason"] for e in kube.events()] == ["RebalanceCancelled"]


def test_a_new_leader_whose_window_outlasts_the_events_evicts_nothing_until_it_could_know() -> None:
    """With workloadWindow 2h and Events that live 1h, a new leader cannot know an eviction its predecessor
    made between one and two hours ago, which may still hold a workload's only eviction of the window. It
    evicts nothing for the difference (1h), says why in the plan, and then goes on; a window within the
    Events' life is rebuilt from them and changes nothing."""
    clock = [NOW + 1]

    def leader(window: str, event_ttl: float) -> tuple[Rebalancer, Calls]:
        kube = Calls()
        p, _ = policy(consecutiveAbnormal=1, workloadWindow=window)
        nodes, pods = NodeCache(lambda: p, clock=lambda: clock[0]), PodCache(lambda: p)
        nodes.replace([node("hot", 0.99), node("cool", 0.10)], "1")
        pods.replace([pod(f"p{i}", "hot", cpu="500m", owner_name=f"o{i}") for i in range(3)], "1")
        ev = Evictor(kube, dry_run=False, clock=lambda: clock[0])  # type: ignore[arg-type]
        r = Rebalancer(lambda: p, nodes, pods, ev, RebalancerMetrics(), clock=lambda: clock[0],
                       sleep=lambda s: None, term=lambda: 1, events=lambda: ([], NOW),
                       event_ttl=event_ttl)  # fmt: skip
        return r, kube

    r, kube = leader("2h", 3600.0)
    plan = r.cycle()
    assert plan is not None and plan.evictions == [] and kube.evictions() == []
    why = {c.why for n in plan.nodes for c in n.candidates}
    assert len(why) == 1 and "workloadWindow 2h outlasts the Events (1h, --event-ttl)" in why.pop()
    clock[0] = NOW + 3600 + 2  # every eviction it could not know of has left the window now
    nodes_hot = [node("hot", 0.99, at=clock[0] - 30), node("cool", 0.10, at=clock[0] - 30)]
    r.nodes.replace(nodes_hot, "2")
    plan = r.cycle()
    assert plan is not None and len(kube.evictions()) == 2

    clock[0] = NOW + 1
    r, kube = leader("30m", 3600.0)
    assert r.cycle() is not None and len(kube.evictions()) == 2
