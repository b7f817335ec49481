"""Peak memory of the rebalancer's watches at 5000 nodes and 100 000 pods, as they list from the API server.

Run: ``python -m bench.rebalancer_memory [--nodes 5000 --pods-per-node 20] [--page 500] [--unpaged]``.

Each measurement is a fresh process (``--child``), so its peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss``,
what the kernel counts against a container's memory limit) is its own: the production ``Reflector``, with
the rebalancer's ``NodeCache`` and ``PodCache`` as handlers, lists nodes and bound pods from an API double
that serves pages the way kube-apiserver does (``limit`` + ``continue``, each page encoded as JSON and parsed
by ``Kube`` as a real reply is), then lists them all again (the resync every ``--resync``), then runs one
cycle. The objects are shaped like kube-apiserver's (a pod of about 4 KB of JSON: managedFields, the
service-account volume, the two default tolerations, status with conditions and container statuses; a node
of about 9 KB with its images), so the bytes and dicts a page costs are those of a real list.

``--unpaged`` adds a row where each list is served as one page (``limit`` ignored): a list of everything
held at once. Its peak includes the double's own copy of the objects while it encodes that one reply, so it
overstates what a real API server's reply costs the program; it shows the shape, not the figure.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

import orjson

from ballast.contract.annotations import CPU_USAGE_AVG_5M, MEM_USAGE_AVG_5M, format_load
from ballast.kube.client import Kube, Reflector
from ballast.model.policy import parse_policy
from ballast.rebalancer.cache import NodeCache, PodCache
from ballast.rebalancer.evictor import Evictor
from ballast.rebalancer.metrics import RebalancerMetrics
from ballast.rebalancer.run import Rebalancer
from bench.rebalancer_cluster import CountingKube, policy_text

NOW = time.time()
STAMP = "2026-11-20T08:00:00Z"


def pod(i: int, j: int) -> dict[str, Any]:
    name, node, ns, rs = (
        f"web-{i}-{j}-7d9f8b6c5d-x2x9q",
        f"node-{i:05d}",
        f"team-{j % 20}",
        f"web-{i}-{j}-7d9f8b6c5d",
    )
    uid = f"{i:08x}-{j:04x}-4b1e-9c3a-5f2d7e8a1b6c"
    return {
        "metadata": {
            "name": name, "generateName": f"{rs}-", "namespace": ns, "uid": uid,
            "resourceVersion": str(100000 + i * 100 + j), "creationTimestamp": STAMP,
            "labels": {"app": f"web-{i}-{j}", "pod-template-hash": "7d9f8b6c5d", "tier": "frontend"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                                 "uid": f"rs-{i:08x}-{j:04x}", "controller": True,
                                 "blockOwnerDeletion": True}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                 "time": STAMP,
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {
                     ".": {}, "f:app": {}, "f:pod-template-hash": {}, "f:tier": {}}, "f:ownerReferences": {
                     ".": {}, f'k:{{"uid":"rs-{i:08x}-{j:04x}"}}': {}}}, "f:spec": {"f:containers": {
                     'k:{"name":"web"}': {".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                                          "f:ports": {}, "f:resources": {}, "f:terminationMessagePath": {}}},
                     "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {},
                     "f:schedulerName": {}, "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": STAMP,
                 "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": {
                     "f:conditions": {}, "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {},
                     "f:phase": {}, "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}}},
            ],
        },
        "spec": {
            "volumes": [{"name": "kube-api-access-abcde", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ], "defaultMode": 420}}],
            "containers": [{
                "name": "web", "image": "registry.example.com/team/web:1.24.3",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": ("100m", "250m", "500m")[j % 3], "memory": "256Mi"},
                              "limits": {"memory": "512Mi"}},
                "volumeMounts": [{"name": "kube-api-access-abcde", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "nodeName": node,
            "securityContext": {}, "schedulerName": "default-scheduler", "priority": 0,
            "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
            ],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": STAMP}
                           for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                     "PodScheduled")],
            "hostIP": f"10.0.{i // 250}.{i % 250}", "hostIPs": [{"ip": f"10.0.{i // 250}.{i % 250}"}],
            "podIP": f"10.{i // 250}.{i % 250}.{j}", "podIPs": [{"ip": f"10.{i // 250}.{i % 250}.{j}"}],
            "startTime": STAMP, "qosClass": "Burstable",
            "containerStatuses": [{"name": "web", "state": {"running": {"startedAt": STAMP}},
                                   "lastState": {}, "ready": True, "restartCount": 0,
                                   "image": "registry.example.com/team/web:1.24.3",
                                   "imageID": "registry.example.com/team/web@sha256:" + "ab" * 32,
                                   "containerID": "containerd://" + f"{i:032x}{j:032x}", "started": True}],
        },
    }  # fmt: skip


def node(i: int, load: float) -> dict[str, Any]:
    name = f"node-{i:05d}"
    return {
        "metadata": {"name": name, "uid": f"n-{i:08x}", "resourceVersion": str(i + 1),
                     "creationTimestamp": STAMP,
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": f"zone-{i % 3}",
                                "node.kubernetes.io/instance-type": "m6i.4xlarge"},
                     "annotations": {CPU_USAGE_AVG_5M: format_load(load, NOW - 30),
                                     MEM_USAGE_AVG_5M: format_load(0.3, NOW - 30),
                                     "node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
                     "managedFields": [{"manager": "kubelet", "operation": "Update", "time": STAMP,
                                        "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {
                                            "f:allocatable": {}, "f:capacity": {}, "f:conditions": {},
                                            "f:images": {}, "f:nodeInfo": {}}}}]},
        "spec": {"podCIDR": f"10.{i // 250}.{i % 250}.0/24", "providerID": f"aws:///zone/i-{i:017x}"},
        "status": {
            "capacity": {"cpu": "16", "memory": "65536Mi", "pods": "110", "ephemeral-storage": "100Gi"},
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "95Gi"},
            "conditions": [{"type": t, "status": "False" if t != "Ready" else "True",
                            "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP,
                            "reason": f"Kubelet{t}", "message": f"kubelet reports {t}"}
                           for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")],
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"machineID": f"{i:032x}", "systemUUID": f"{i:032x}", "bootID": f"{i:032x}",
                         "kernelVersion": "6.1.0", "osImage": "Debian GNU/Linux 12",
                         "containerRuntimeVersion": "containerd://1.7.24", "kubeletVersion": "v1.36.2",
                         "kubeProxyVersion": "v1.36.2", "operatingSystem": "linux", "architecture": "amd64"},
            "images": [{"names": [f"registry.example.com/team/image-{k}@sha256:{k:064x}",
                                  f"registry.example.com/team/image-{k}:1.{k}"], "sizeBytes": 10_000_000 + k}
                       for k in range(30)],
        },
    }  # fmt: skip


class PagingApi(Kube):
    """kube-apiserver's list paging, in-process: ``limit`` objects a page, ``continue`` = the next index.
    Each page is encoded to JSON and parsed back, as ``Kube.get`` parses a real reply."""

    def __init__(self, nodes: int, per_node: int, unpaged: bool) -> None:
        super().__init__(None)
        self.nodes, self.per_node, self.unpaged = nodes, per_node, unpaged
        self.loads = [0.9 if i % 20 == 0 else 0.2 if i % 20 < 9 else 0.6 for i in range(nodes)]

    def _object(self, path: str, k: int) -> dict[str, Any]:
        if path.endswith("/nodes"):
            return node(k, self.loads[k])
        return pod(k // self.per_node, k % self.per_node)

    def get(self, path: str, query: Any = None) -> dict[str, Any]:
        total = self.nodes if path.endswith("/nodes") else self.nodes * self.per_node
        start = int((query or {}).get("continue") or 0)
        limit = total if self.unpaged else int((query or {}).get("limit") or total)
        end = min(total, start + limit)
        meta = {"resourceVersion": "999999"} | ({"continue": str(end)} if end < total else {})
        body = orjson.dumps({"kind": "List", "apiVersion": "v1", "metadata": meta,
                             "items": [self._object(path, k) for k in range(start, end)]})  # fmt: skip
        return orjson.loads(body)


def child(nodes: int, per_node: int, page: int, unpaged: bool) -> dict[str, Any]:
    policy = parse_policy(policy_text(10))
    api = PagingApi(nodes, per_node, unpaged)
    nc, pc = NodeCache(lambda: policy), PodCache(lambda: policy)
    watches = [Reflector(api, "/api/v1/nodes", nc, name="nodes", page_size=page),
               Reflector(api, "/api/v1/pods", pc, params={"fieldSelector": "spec.nodeName!="}, name="pods",
                         page_size=page)]  # fmt: skip
    t0 = time.perf_counter()
    for r in watches:
        r._relist()
    first = time.perf_counter() - t0
    after_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for r in watches:  # the resync: every object listed again while the caches hold the last list
        r._relist()
    r = Rebalancer(lambda: policy, nc, pc, Evictor(CountingKube(), dry_run=False), RebalancerMetrics(),  # type: ignore[arg-type]
                   sleep=lambda s: None)  # fmt: skip
    t0 = time.perf_counter()
    plan = r.cycle()
    cycle = time.perf_counter() - t0
    assert plan is not None and len(pc) == nodes * per_node and len(nc) == nodes
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    return {
        "nodes": nodes, "pods": len(pc), "page": "all" if unpaged else page, "list_s": first,
        "peak_start_mib": after_start, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_mib": rss, "cycle_ms": cycle * 1000, "evictions": len(plan.evictions),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods-per-node", type=int, default=20)
    ap.add_argument("--page", type=int, default=500)
    ap.add_argument("--unpaged", action="store_true", help="also measure lists served as one page")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--one-page", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.nodes, args.pods_per_node, args.page, args.one_page)))
        return 0
    print("| nodes | pods | list page | list + parse at start | peak RSS after start | peak RSS after a "
          "relist and a cycle | RSS after | cycle |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for unpaged in (False, True) if args.unpaged else (False,):
        cmd = [sys.executable, "-m", "bench.rebalancer_memory", "--child", "--nodes", str(args.nodes),
               "--pods-per-node", str(args.pods_per_node), "--page", str(args.page)]  # fmt: skip
        m = json.loads(subprocess.run(cmd + (["--one-page"] if unpaged else []), check=True,
                                      capture_output=True, text=True).stdout)  # fmt: skip
        cells = [m["nodes"], m["pods"], m["page"], f"{m['list_s']:.1f} s", f"{m['peak_start_mib']:.0f} MiB",
                 f"**{m['peak_mib']:.0f} MiB**", f"{m['rss_mib']:.0f} MiB",
                 f"{m['cycle_ms']:.0f} ms"]  # fmt: skip
        print("| " + " | ".join(map(str, cells)) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
