"""How long the CPU manager takes: one allocation decision, and one reconcile pass over 200 containers.

Run: ``python -m bench.reconcile_bench``. Machine: 2 sockets x 64 cores x 2 threads, 8 NUMA nodes
(AMD EPYC 7742, NPS=4), 256 CPUs, 2 reserved. Node: 100 pods, 200 running containers (exclusive pods
with topology results, immovable, numa and shared pods). The runtime is ``MemoryRuntime`` (in-process);
one extra row sends the same first pass over gRPC to an in-process CRI server on a unix socket.

Goals: an allocation decision under 1 ms, a reconcile pass under 50 ms. Prints a markdown table.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path

from ballast.agent.cpumanager.manager import CPUManager
from ballast.agent.cpumanager.runtime import MemoryRuntime
from ballast.agent.cpuset import CPUSet
from ballast.agent.topology.model import CPUTopology
from ballast.contract.pod import parse_pod

SCHEDULER = "ballast-scheduler"
NODE = "bench-node"


def epyc_2s_8numa_256() -> CPUTopology:
    """NUMA node N holds cores 16N..16N+15 and their siblings (CPU c and c+128 share a core)."""
    return CPUTopology.from_cpus((cpu, cpu % 128, (cpu % 128) // 64, (cpu % 128) // 16) for cpu in range(256))


def _container(name: str, cpu: str, memory: str | None = "256Mi", request: str | None = None) -> dict:
    limits = {"cpu": cpu, **({"memory": memory} if memory else {})}
    requests = {**limits, **({"cpu": request} if request else {})}
    return {"name": name, "image": "app", "resources": {"limits": limits, "requests": requests}}


def _pod(
    i: int, containers: list[dict], *, policy: str | None = None, result: dict[int, int] | None = None
) -> dict:
    uid = f"{i:08d}-0000-4000-8000-000000000000"
    annotations = {}
    if policy:
        annotations["topology.crane.io/cpu-policy"] = policy
    if result:
        annotations["topology.crane.io/topology-result"] = json.dumps(
            [
                {"name": f"node{n}", "type": "Node", "resources": {"capacity": {"cpu": str(k)}}}
                for n, k in result.items()
            ]
        )
    return {
        "metadata": {
            "name": f"pod-{i}",
            "namespace": "bench",
            "uid": uid,
            "annotations": annotations,
            "creationTimestamp": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
        },
        "spec": {"nodeName": NODE, "schedulerName": SCHEDULER, "containers": containers},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": c["name"],
                    "containerID": f"containerd://{uid[:8]}{c['name']}",
                    "state": {"running": {}},
                }
                for c in containers
            ],
        },
    }


def node_pods() -> list[dict]:
    """100 pods, 200 containers: 50 exclusive (2+1 CPUs, one NUMA zone each), 10 immovable (2 CPUs),
    10 numa (2 containers), 30 shared (2 or 3 containers)."""
    pods = []
    i = 0
    for k in range(50):
        pods.append(_pod(i, [_container("main", "2"), _container("side", "1")], result={k % 8: 3}))
        i += 1
    for k in range(10):
        pods.append(_pod(i, [_container("main", "2")], policy="immovable", result={(k + 3) % 8: 2}))
        i += 1
    for k in range(10):
        pods.append(
            _pod(i, [_container("a", "1"), _container("b", "500m")], policy="numa", result={k % 8: 1})
        )
        i += 1
    for k in range(30):
        n = 2 if k < 20 else 3
        pods.append(_pod(i, [_container(f"c{j}", "1", request="250m") for j in range(n)]))
        i += 1
    assert sum(len(p["spec"]["containers"]) for p in pods) == 200
    return pods


def _time(call: Callable[[], object], repeat: int = 7) -> tuple[float, float]:
    """(median, best) milliseconds per call."""
    timer = timeit.Timer(call)
    number, _ = timer.autorange()
    runs = [t / number * 1e3 for t in timer.repeat(repeat=repeat, number=number)]
    return statistics.median(runs), min(runs)


def _once(setup: Callable[[], Callable[[], object]], repeat: int = 7) -> tuple[float, float]:
    """(median, best) milliseconds of a call that changes state, with a fresh ``setup()`` per run."""
    runs = []
    for _ in range(repeat):
        call = setup()
        started = time.perf_counter()
        call()
        runs.append((time.perf_counter() - started) * 1e3)
    return statistics.median(runs), min(runs)


def main() -> None:
    topology = epyc_2s_8numa_256()
    reserved = CPUSet.of(0, 128)
    pods = node_pods()
    tmp = Path(tempfile.mkdtemp(prefix="ballast-bench-"))
    rows: list[tuple[str, float, float, str]] = []
    try:

        def manager(path: Path, runtime=None) -> CPUManager:
            return CPUManager(
                topology,
                reserved,
                path,
                runtime or MemoryRuntime(),
                allowed_schedulers=[SCHEDULER],
                node_name=NODE,
            )

        # A node in steady state: everything allocated and applied.
        steady = manager(tmp / "steady")
        steady.on_pods(pods)
        first = steady.reconcile_once()
        assert first.allocated == 60 and first.updates == 200 and first.update_errors == 0, first
        policy = steady.policy
        state = steady.state
        free = len(policy.allocatable(state))

        # Allocation decisions against the busy state (170 of 254 allocatable CPUs taken).
        with_result = parse_pod(_pod(900, [_container("main", "4")], result={5: 4}))
        anywhere = parse_pod(_pod(901, [_container("main", "8")]))
        split = parse_pod(_pod(902, [_container("a", "6"), _container("b", "6")], result={6: 6, 7: 6}))
        for label, info in (
            ("allocate 4 CPUs, result on one NUMA node", with_result),
            ("allocate 8 CPUs, no result (whole machine)", anywhere),
            ("allocate 2x6 CPUs, result on two NUMA nodes", split),
        ):
            decision = policy.decide(info)
            assert policy.allocate(state, info, decision) is not None
            median, best = _time(lambda i=info, d=decision: policy.allocate(state, i, d))
            rows.append((f"{label} ({free} free)", median, best, "< 1 ms"))
        raw = pods[0]
        median, best = _time(lambda: policy.decide(parse_pod(raw)))
        rows.append(("pod event: parse + decide (2 containers, result)", median, best, ""))

        median, best = _time(steady.reconcile_once)
        rows.append(("reconcile pass, 200 containers, nothing changed", median, best, "< 50 ms"))

        def shared_pool_changes() -> Callable[[], object]:
            m = manager(tmp / f"churn-{time.monotonic_ns()}")
            m.on_pods(pods)
            m.reconcile_once()
            m.on_pods(pods[1:])  # an exclusive pod leaves: 3 CPUs back, ~100 shared containers move
            return m.reconcile_once

        median, best = _once(shared_pool_changes)
        rows.append(("reconcile pass, a pod leaves (release + ~100 updates)", median, best, "< 50 ms"))

        def cold_start() -> Callable[[], object]:
            m = manager(tmp / f"cold-{time.monotonic_ns()}")
            m.on_pods(pods)
            return m.reconcile_once

        median, best = _once(cold_start)
        rows.append(("first pass: 60 allocations, one checkpoint write, 200 updates", median, best, ""))

        try:
            from ballast.agent.cpumanager.runtime import CRIRuntime
            from ballast.agent.cri.client import CRIClient
            from ballast.testing.cri_fake import FakeRuntimeService, serve_fake_runtime
        except ImportError:  # pragma: no cover - the tests directory is not installed
            serve_fake_runtime = None
        if serve_fake_runtime is not None:
            service = FakeRuntimeService()
            for p in pods:
                for c in p["status"]["containerStatuses"]:
                    service.add_container(c["containerID"].split("://")[1], p["metadata"]["uid"], c["name"])
            with serve_fake_runtime(service) as (_, endpoint):
                runtime = CRIRuntime(client=CRIClient(endpoint))

                def cold_grpc() -> Callable[[], object]:
                    m = manager(tmp / f"grpc-{time.monotonic_ns()}", runtime)
                    m.on_pods(pods)
                    return m.reconcile_once

                median, best = _once(cold_grpc, repeat=5)
                rows.append(("first pass over gRPC (in-process CRI server)", median, best, ""))
                runtime.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print("CPU manager on 2 sockets, 8 NUMA nodes, 256 CPUs; 100 pods, 200 running containers\n")
    print("| case | median ms | best ms | goal |")
    print("|---|---:|---:|---|")
    for label, median, best, goal in rows:
        verdict = ""
        if goal:
            limit = float(goal.split()[1])
            verdict = f"{goal} {'ok' if median < limit else 'MISSED'}"
        print(f"| {label} | {median:.3f} | {best:.3f} | {verdict} |")


if __name__ == "__main__":
    main()
