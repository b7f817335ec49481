"""How much one annotator cycle costs at 5000 nodes and 6 metrics, against crane-scheduler's annotator.

Run: ``python -m bench.annotator_bench [--nodes 5000]``. Needs ``prometheus`` and ``promtool`` (Debian
package ``prometheus``).

Set-up: a real Prometheus with backfilled series for every node and every metric of the bundled policy
(90% scraped as ``IP:9100``, 10% under the node name), behind a counting reverse proxy with a path
prefix; the fake Kubernetes API server with the nodes (InternalIP + hostname) and recently bound pods.
The annotator is built from its production parts (``PrometheusClient``, ``KubeNodeWriter`` over the
official client, ``Annotator``); each row is one cycle:

1. a fresh cluster (no annotations yet): every node gets one patch with all 6 metrics and its hot value;
2. the same data again: nothing changed and nothing is about to expire, so nothing is written;
3. 10% of the nodes carry other values (as after a change in load): only they are written;
4. a hot-value-only cycle (every minute between metric syncs) after new bindings on 1% of the nodes.

crane's counts for the same cycle, from its code (anchors.md §4 items 8-9): for every (node, metric) 1 to 3
sequential instant queries (InternalIP, IP:port, then name) and 2 JSON patches (the metric, then the hot
value), whether or not anything changed.

Goals: queries per cycle = number of metrics; API writes <= nodes whose values changed; a cycle well
under the shortest sync period (3m). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ballast.annotator.bindings import Binding, BindingRecords
from ballast.annotator.controller import Annotator, KubeNodeWriter
from ballast.annotator.prometheus import PrometheusClient, PrometheusConfig
from ballast.annotator.sources import NodeIndex, PodBindings
from ballast.contract.annotations import HOT_VALUE_KEY, format_load
from ballast.kube.client import Kube
from ballast.model.policy import load_policy
from ballast.testing.annotator import add_node, stamp
from ballast.testing.fakekube import FakeKube, make_pod
from ballast.testing.parts import POLICY_FILE
from ballast.testing.prometheus import BackfillSeries, CountingProxy, PrometheusServer

POLICY = load_policy(POLICY_FILE)


def ip(i: int) -> str:
    return f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def value(i: int, m: int) -> float:
    return round(5 + (i * 7 + m * 13) % 90 + (i % 1000) / 1000, 3)


def dataset(nodes: int) -> list[BackfillSeries]:
    out = []
    for m, metric in enumerate(POLICY.metrics):
        for i in range(nodes):
            instance = node_name(i) if i % 10 == 9 else f"{ip(i)}:9100"
            out.append(BackfillSeries(metric, {"instance": instance, "job": "node-exporter"}, value(i, m)))
    return out


@dataclass
class Row:
    name: str
    queries: int
    writes: int
    changed: int
    seconds: float


def bound_pod(name: str, node: str, when: float) -> dict:
    pod = make_pod(name, node_name=node)
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["metadata"]["creationTimestamp"] = stamp(when)
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(when)}],
    }
    return pod


async def cycle(
    annotator: Annotator, metrics: tuple[str, ...], proxy: CountingProxy, fake: FakeKube
) -> tuple:
    q0 = proxy.queries()
    fake.clear_requests()
    t0 = time.perf_counter()
    report = await annotator.cycle(metrics)
    seconds = time.perf_counter() - t0
    writes = sum(1 for r in fake.requests if r.method == "PATCH")
    return proxy.queries() - q0, writes, report.changed_nodes, seconds, report


async def bench(nodes: int, workdir: Path) -> tuple[list[Row], dict[str, float]]:
    info: dict[str, float] = {}
    series = dataset(nodes)
    with (
        PrometheusServer(workdir / "prom", series, history=120, step=30) as prom,
        CountingProxy(prom.url) as proxy,
        FakeKube(history_limit=200_000) as fake,
    ):
        info["backfill_s"] = prom.backfill_seconds
        t0 = time.perf_counter()
        for i in range(nodes):
            add_node(fake, node_name(i), ip(i))
        now = time.time()
        pods = []
        for i in range(0, nodes, 5):  # a recent burst: 3 bindings on every fifth node
            for k in range(3):
                pods.append(bound_pod(f"p-{i}-{k}", node_name(i), now - 20 - k))
        for pod in pods:
            fake.add(pod)
        info["setup_s"] = time.perf_counter() - t0

        kube = Kube(fake.api_client(), timeout=30)
        index = NodeIndex([*POLICY.metrics, HOT_VALUE_KEY])
        records = BindingRecords(max(w.time_range for w in POLICY.hot_values) + 60)
        handler = PodBindings(records)
        t0 = time.perf_counter()
        items, _ = kube.list_all("/api/v1/nodes")
        index.replace(items)
        pod_items, _ = kube.list_all("/api/v1/pods", {"fieldSelector": "spec.nodeName!="})
        handler.replace(pod_items)
        info["list_s"] = time.perf_counter() - t0

        config = PrometheusConfig(url=proxy.url, timeout=30)
        async with PrometheusClient(config) as client:
            annotator = Annotator(POLICY, client, index, KubeNodeWriter(kube), records, patch_concurrency=8)
            rows = []
            q, w, c, s, report = await cycle(annotator, POLICY.metrics, proxy, fake)
            info["without_data"] = max(report.without_data.values())
            rows.append(Row("1. fresh cluster, all 6 metrics", q, w, c, s))
            q, w, c, s, _ = await cycle(annotator, POLICY.metrics, proxy, fake)
            rows.append(Row("2. same values again", q, w, c, s))

            # 10% of nodes hold other (older) values, as if load had moved since the last cycle.
            stale = format_load(0.99, time.time() - 60)
            for i in range(0, nodes, 10):
                fake.patch(
                    "nodes", node_name(i), {"metadata": {"annotations": dict.fromkeys(POLICY.metrics, stale)}}
                )
            index.replace(kube.list_all("/api/v1/nodes")[0])
            q, w, c, s, _ = await cycle(annotator, POLICY.metrics, proxy, fake)
            rows.append(Row("3. values changed on 10% of nodes", q, w, c, s))

            now = time.time()
            for i in range(1, nodes, 100):  # a new burst of 2 bindings on 1% of nodes
                for k in range(2):
                    records.observe(Binding(f"new-{i}-{k}", node_name(i), now), now)
            q, w, c, s, _ = await cycle(annotator, (), proxy, fake)
            rows.append(Row("4. hot value only, bindings on 1% of nodes", q, w, c, s))
            annotator.close()
        kube.api_client.close()
    return rows, info


def table(rows: list[Row], nodes: int, info: dict[str, float]) -> str:
    metrics = len(POLICY.metrics)
    lines = [
        f"Annotator cycle, {nodes} nodes x {metrics} metrics (real Prometheus, fake API server, "
        "official client, 8 patches in flight)",
        "",
        "| cycle | Prometheus queries | API writes | nodes with changed values | wall time |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r.name} | {r.queries} | {r.writes} | {r.changed} | {r.seconds:.2f} s |")
    full = nodes * metrics
    crane_time = f"{full * 0.06 / 60:.0f}-{full * 0.4 / 60:.0f} min"
    lines += [
        f"| crane, any full cycle | {full}-{3 * full} | {2 * full} | (not checked) | ~{crane_time} |",
        "",
        f"Queries per full cycle: Ballast {metrics} (one per metric, for all nodes); crane {full} to "
        f"{3 * full} ({nodes} to {3 * nodes} per metric). API writes: Ballast one merge patch per node "
        f"with news (none when nothing changed); crane {2 * full} JSON patches every time. crane's time is "
        "its sequential syncs at the 60-400 ms per (node, metric) seen in crane-scheduler#50.",
        f"Set-up (not in the cycle times): backfill {info['backfill_s']:.1f} s, cluster objects "
        f"{info['setup_s']:.1f} s, listing nodes and pods {info['list_s']:.2f} s; nodes without data per "
        f"metric: {int(info['without_data'])}.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000, help="cluster size (default 5000)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ballast-annotator-bench-") as tmp:
        rows, info = asyncio.run(bench(args.nodes, Path(tmp)))
    print(table(rows, args.nodes, info))


if __name__ == "__main__":
    main()
