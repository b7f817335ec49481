"""What the agent's load reporting costs on a real node: CPU per sample and the NodeLoad's size with real
pods, beside the same figures on the fixture tree (``bench.agent_load_bench``).

Run: ``python -m bench.agent_node_bench`` (root; the loopback control plane's binaries, the kubelet and the
test-node recipe, as the real-node tests need them). One real kubelet v1.36.2 with its own containerd runs
``--idle`` pods sleeping and ``--busy`` pods spinning at a 200m limit, all Burstable, under a ``cgroupRoot``
of its own. Then:

- **the sample, in process**: the agent's own reporter (``LoadReporter`` over ``Sampler`` and ``PodCgroups``
  with the kubelet's cgroup layout read from its configuration file, the shipped policy) reads the real
  ``/proc`` and the real pod cgroups once a second, ``--samples`` times; thread CPU time of each tick (the
  sample, the history, and on report ticks the NodeLoad status and annotations rendered; the API writes go
  to a counter, not to the network);
- **the agent process**: ``ballast agent --report-load`` for the node (1 s samples, 2 s reports, CPU
  manager off), its CPU from ``/proc/<pid>/stat`` over ``--samples`` seconds once it has listed every pod,
  per sample: everything the process does (watches, NRT publishing, the API writes, its HTTP endpoint);
- **the NodeLoad** as the API server stores it, as JSON.

Prints a markdown table with medians and ranges; exits 1 when the in-process sample misses the fixture
bench's goal (100 ms) or a pod is not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from ballast.agent.kubelet_config import load_kubelet_config
from ballast.agent.load.cgroups import PodCgroups
from ballast.agent.load.pods import NodePods
from ballast.agent.load.procfs import ProcReader
from ballast.agent.load.reporter import LoadReporter
from ballast.agent.load.sampler import Sampler
from ballast.contract.nodeload import NODELOAD_PATH
from ballast.kube.client import ApiError, Kube
from ballast.model.policy import load_policy
from bench.agent_load_bench import CountingKube
from bench.agent_load_bench import run as fixture_run
from bench.cluster_bench import cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "scheduler_config" / "policy.yaml"
NODE = "bench-node"


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def in_process(kube: Kube, node_kubelet_config: Path, samples: int) -> dict[str, Any]:
    pods = NodePods(NODE)
    pods.replace(kube.get("/api/v1/pods", query={"fieldSelector": f"spec.nodeName={NODE}"})["items"])
    layout = load_kubelet_config(node_kubelet_config).cgroup_layout
    clock = [time.time()]
    counting = CountingKube(clock)
    policy = load_policy(POLICY)
    reporter = LoadReporter(
        counting,  # type: ignore[arg-type]
        NODE,
        Sampler(ProcReader("/proc"), PodCgroups("/sys/fs/cgroup", layout)),
        pods,
        lambda: policy,
        lambda: {"metadata": {"name": NODE, "uid": "u-1", "annotations": {}}},
        sample_interval=1.0,
        report_interval=6.0,
    )
    cpu_ms: list[float] = []
    measured: list[int] = []
    for _ in range(samples + 1):
        clock[0] = time.time()
        started = time.thread_time()
        reporter.tick()
        cpu_ms.append((time.thread_time() - started) * 1000)
        measured.append(int(reporter.metrics.pods_measured._value.get()))
        time.sleep(1.0)
    return {"cpu_ms": cpu_ms[1:], "measured": measured[1:], "layout": layout.describe()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.agent_node_bench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--idle", type=int, default=30, help="pods that sleep")
    parser.add_argument("--busy", type=int, default=3, help="pods that spin at a 200m limit")
    parser.add_argument("--samples", type=int, default=30, help="samples (one a second) for each figure")
    args = parser.parse_args(argv)

    from ballast.testing.binaries import MissingPiece
    from ballast.testing.controlplane import ControlPlane, wait_until
    from ballast.testing.realnode import (
        BURN,
        NodeAgent,
        RealNodePool,
        busybox_pod,
        check_real_nodes,
        wait_running,
    )

    try:
        check_real_nodes()
    except MissingPiece as exc:
        print(f"not run: {exc}")
        return 1
    with ControlPlane() as cp:
        cp.kubectl("apply", "-f", str(ROOT / "scheduler_config" / "crd-nodeload.yaml"))
        cp.kubectl("wait", "--for=condition=Established", "crd/nodeloads.ballast.io", "--timeout=60s")
        pool = RealNodePool(cp)
        try:
            node = pool.get(NODE)
            core = cp.core()
            names = []
            for i in range(args.idle):
                names.append(f"idle-{i:02d}")
                idle = busybox_pod(names[-1], "exec sleep 36000", node=NODE, requests={"cpu": "10m"})
                core.create_namespaced_pod("default", idle)
            for i in range(args.busy):
                names.append(f"busy-{i}")
                busy = busybox_pod(
                    names[-1], BURN, node=NODE, requests={"cpu": "100m"}, limits={"cpu": "200m"}
                )
                core.create_namespaced_pod("default", busy)
            started = time.monotonic()
            wait_running(core, names, timeout=600)
            pods_up = time.monotonic() - started
            kube = Kube(cp.api())
            local = in_process(kube, node.kubelet_config, args.samples)

            with tempfile.TemporaryDirectory() as work:
                agent = NodeAgent(cp, node, Path(work), policy=yaml.safe_load(POLICY.read_text()))
                try:
                    pid = agent.server.proc.pid

                    def all_listed() -> bool:
                        try:
                            obj = kube.get(f"{NODELOAD_PATH}/{NODE}")
                        except ApiError:
                            return False
                        return len((obj.get("status") or {}).get("pods") or []) == len(names)

                    wait_until(all_listed, agent.server, "every pod in the NodeLoad", 120)
                    per_sample: list[float] = []
                    for _ in range(3):  # three stretches: a median with a range
                        before, t0 = cpu_seconds(pid, tree=False), time.monotonic()
                        time.sleep(args.samples / 3)
                        per_sample.append(
                            (cpu_seconds(pid, tree=False) - before) / (time.monotonic() - t0) * 1000
                        )
                    obj = kube.get(f"{NODELOAD_PATH}/{NODE}")
                finally:
                    agent.stop()
        finally:
            pool.close()
    size = len(json.dumps(obj, separators=(",", ":")))
    fixture = fixture_run(60, ("payments", "checkout-api-7d9f8b6c5d-x2k4p"))
    total = len(names)
    print(f"agent load reporting on a real node: kubelet v1.36.2, {local['layout']}, {args.idle} idle "
          f"and {args.busy} busy pods (running {pods_up:.1f} s after creation), "
          f"{os.cpu_count()} CPUs\n")  # fmt: skip
    print("| figure | real node | fixture tree (110 pods, agent_load_bench) |")
    print("|---|---|---|")
    print(f"| CPU per sample, in process, median (range) | {spread(local['cpu_ms'])} ms for {total} pods | "
          f"{fixture['cpu_mean']:.1f} ms mean ({fixture['cpu_max']:.1f} worst) |")  # fmt: skip
    print(f"| CPU per sample per pod | {statistics.median(local['cpu_ms']) / total * 1000:.0f} µs | "
          f"{fixture['cpu_mean'] / 110 * 1000:.0f} µs |")  # fmt: skip
    print(f"| the agent process's CPU per 1 s sample, median (range) | {spread(per_sample)} ms | |")
    print(f"| pods measured per sample | {min(local['measured'])}-{max(local['measured'])} of {total} | |")
    print(f"| NodeLoad JSON as stored | {size / 1024:.1f} KiB ({total} pods) | "
          f"{fixture['size'] / 1024:.1f} KiB (110 pods) |")  # fmt: skip
    ok = statistics.median(local["cpu_ms"]) < 100 and min(local["measured"]) == total
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
