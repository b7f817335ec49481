"""RBAC of the manifests in scheduler_config/deploy, derived from the code's API calls, not by hand.

Each component runs its real code paths against the fake API server, configured from its manifest (the
container's own arguments, the policy from its ConfigMap); the fake's request log gives every call, as
the RBAC authorizer would see it. Then, for the component's service account: (a) every call is allowed
by the manifests' rules, and (b) every permission those rules grant is used by some call, except the few
listed in EXEMPT with the reason no Ballast code path can show them.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ballast import cli
from ballast.contract.seal import SEAL_ANNOTATION, load_key
from ballast.contract.topology_result import AWARENESS_KEY
from ballast.extender.main import create_app
from ballast.kube.client import Kube, load_api_client
from ballast.model.policy import load_policy
from ballast.testing.annotator import StubPrometheus, bind_pod, constant_prometheus
from ballast.testing.fakekube import FakeKube, make_node, make_nrt, make_pod
from ballast.testing.parts import wait_for
from tests.agent.sysfs_fixtures import TWO_SOCKETS_HT, write_sysfs
from tests.deploy_rbac import (
    DEPLOY,
    PROMETHEUS,
    ApiCall,
    Audit,
    Grant,
    Permission,
    api_call,
    audit,
    calls_from,
    find,
    grants_for,
    load_documents,
    manifests,
    objects,
)

DOCS = objects({**manifests(DEPLOY, recursive=False), **manifests(PROMETHEUS)})
"""The default install and the Prometheus component (the annotator)."""
OPTIONAL = DEPLOY / "optional"
NAMESPACE = "ballast-system"

# ------------------------------------------------------------------------------------------ manifests


def workload(kind: str, name: str) -> dict[str, Any]:
    return find(DOCS, kind, name)


def ballast_container(pod_spec: dict[str, Any], command: str) -> dict[str, Any]:
    """The container (or native sidecar) whose args run ``ballast <command>``."""
    found = [
        c
        for c in [*(pod_spec.get("initContainers") or []), *pod_spec["containers"]]
        if (c.get("args") or [None])[0] == command
    ]
    assert len(found) == 1, f"expected one container running `ballast {command}`"
    return found[0]


def service_account(kind: str, name: str) -> tuple[str, str]:
    obj = workload(kind, name)
    return obj["metadata"]["namespace"], obj["spec"]["template"]["spec"]["serviceAccountName"]


def replace_flag(args: list[str], flag: str, value: str) -> list[str]:
    """``args`` with the value after ``flag`` replaced (the flag must be there)."""
    assert flag in args, f"{flag} is not in {args}"
    out = list(args)
    out[out.index(flag) + 1] = value
    return out


def result_key_file(tmp_path: Path) -> Path:
    """What the Secret ballast-result-key holds, as install step 4 creates it (64 hex characters)."""
    path = tmp_path / "result-key"
    path.write_text(secrets.token_hex(32))
    return path


def policy_file(tmp_path: Path) -> Path:
    """The policy exactly as the pods see it: the ballast-policy ConfigMap's file."""
    cm = workload("ConfigMap", "ballast-policy")
    path = tmp_path / "policy.yaml"
    path.write_text(cm["data"]["policy.yaml"])
    return path


def explain(result: Audit) -> str:
    lines = ["calls the manifests do not allow:"] + [f"  {c}" for c in result.denied]
    lines += ["permissions no call used:"] + [f"  {p}" for p in result.unused]
    return "\n".join(lines)


# Permissions no Ballast code path exercises, each with the reason it is granted anyway.
SCHEDULER_LEADER_ELECTION = (
    "kube-scheduler's own leader election (client-go LeaseLock: get, create, update), not Ballast code"
)
EXEMPT: dict[Permission, str] = {
    Permission(
        "Role", "ballast-scheduler-leader-election", NAMESPACE, "coordination.k8s.io", "leases", verb, name
    ): SCHEDULER_LEADER_ELECTION
    for verb, name in (("create", ""), ("get", "ballast-scheduler"), ("update", "ballast-scheduler"))
}


# ------------------------------------------------------------------------------------------- extender


def test_extender_rbac_is_exactly_what_the_extender_calls(
    fake_kube: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    """filter, prioritize, bind (NUMA result patch, Binding; a pod filter never saw), preempt, cache sync."""
    pod_spec = workload("Deployment", "ballast-scheduler")["spec"]["template"]["spec"]
    sidecar = ballast_container(pod_spec, "extender")
    argv = replace_flag(sidecar["args"], "--policy", str(policy_file(tmp_path)))
    args = cli.build_parser().parse_args(
        replace_flag(argv, "--result-key-file", str(result_key_file(tmp_path)))
    )

    for name in ("n1", "n2"):
        fake_kube.add(make_node(name, cpu="8", memory="16Gi"))
    zones = [
        {
            "name": f"node{i}",
            "type": "Node",
            "resources": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}},
        }
        for i in range(2)
    ]
    fake_kube.add(make_nrt("n1", zones=zones))
    fake_kube.register_custom_resource(
        "topology.node.k8s.io", "v1alpha2", "noderesourcetopologies", "NodeResourceTopology"
    )
    victim = fake_kube.add(make_pod("batch", namespace="shop", node_name="n2", cpu="1", memory="1Gi"))
    for name in ("web-1", "web-2"):
        fake_kube.add(
            make_pod(
                name, namespace="shop", cpu="2", memory="1Gi", limits=True, scheduler_name="ballast-scheduler"
            )
        )

    kube = Kube(load_api_client(str(kubeconfig)), timeout=args.api_timeout)
    app = create_app(
        load_policy(args.policy),
        policy_path=args.policy,
        policy_poll_seconds=0,
        kube=kube,
        resync_seconds=args.resync,
        result_key=load_key(args.result_key_file),
    )
    with TestClient(app) as client:
        assert app.state.services.cache.wait_synced(10)
        assert fake_kube.wait_for_watches(4)
        pod = fake_kube.get("pods", "web-1", namespace="shop")
        body = {"Pod": pod, "NodeNames": ["n1", "n2"]}
        assert client.post("/filter", json=body).status_code == 200
        assert client.post("/prioritize", json=body).status_code == 200
        for name in ("web-1", "web-2"):  # web-2 was never filtered: bind reads the pod first
            uid = fake_kube.get("pods", name, namespace="shop")["metadata"]["uid"]  # type: ignore[index]
            bind = {"PodName": name, "PodNamespace": "shop", "PodUID": uid, "Node": "n1"}
            assert client.post("/bind", json=bind).json() == {"Error": ""}
            bound = fake_kube.get("pods", name, namespace="shop")
            assert bound["spec"]["nodeName"] == "n1"  # type: ignore[index]
            assert "topology.crane.io/topology-result" in bound["metadata"]["annotations"]  # type: ignore[index]
            assert SEAL_ANNOTATION in bound["metadata"]["annotations"]  # type: ignore[index]
        preempt = {
            "Pod": pod,
            "NodeNameToMetaVictims": {
                "n2": {"Pods": [{"UID": victim["metadata"]["uid"]}], "NumPDBViolations": 0}
            },
        }
        assert client.post("/preempt", json=preempt).status_code == 200
        assert client.post("/explain", json={"Pod": pod}).status_code == 200
        assert client.get("/nodes").status_code == 200

    calls = calls_from(fake_kube.requests)
    assert ApiCall("get", "", "pods", "", "shop", "web-2") in calls
    assert ApiCall("patch", "", "pods", "", "shop", "web-1") in calls
    assert ApiCall("create", "", "pods", "binding", "shop", "web-1") in calls
    bindings = grants_for(DOCS, *service_account("Deployment", "ballast-scheduler"))
    result = audit(calls, bindings.grants, EXEMPT)
    assert not result.denied and not result.unused, explain(result)


def test_the_scheduler_identity_is_kube_scheduler_plus_ballast() -> None:
    """The built-in roles bound to the scheduler's account, and its Lease matching the scheduler config."""
    bindings = grants_for(DOCS, *service_account("Deployment", "ballast-scheduler"))
    assert sorted(bindings.builtin) == [
        ("ClusterRole", "system:kube-scheduler", ""),
        ("ClusterRole", "system:volume-scheduler", ""),
        ("Role", "extension-apiserver-authentication-reader", "kube-system"),
    ]
    config = load_documents_from_configmap("ballast-scheduler-config", "scheduler-config.yaml")
    election = config["leaderElection"]
    assert election["leaderElect"] is True and election.get("resourceLock", "leases") == "leases"
    lease_calls = [
        ApiCall("create", "coordination.k8s.io", "leases", "", election["resourceNamespace"], ""),
        ApiCall(
            "get",
            "coordination.k8s.io",
            "leases",
            "",
            election["resourceNamespace"],
            election["resourceName"],
        ),
        ApiCall(
            "update",
            "coordination.k8s.io",
            "leases",
            "",
            election["resourceNamespace"],
            election["resourceName"],
        ),
    ]
    # The exemptions are exactly what kube-scheduler's leader election calls on that Lease.
    result = audit(
        lease_calls, [g for g in bindings.grants if g.role_name == "ballast-scheduler-leader-election"]
    )
    assert not result.denied and not result.unused, explain(result)
    # No other account may touch that Lease, and the default scheduler's Lease is not granted.
    other = ApiCall("update", "coordination.k8s.io", "leases", "", "kube-system", "kube-scheduler")
    assert not any(g.allows(other) for g in bindings.grants)


def load_documents_from_configmap(name: str, key: str) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(workload("ConfigMap", name)["data"][key])


# ------------------------------------------------------------------------------------------ annotator


NODE_IPS = {"w1": "10.0.0.1", "w2": "10.0.0.2"}


@pytest.fixture
def prometheus() -> Iterator[StubPrometheus]:
    """The annotator's Prometheus side is tested against a real Prometheus in tests/annotator; here only
    its Kubernetes API calls matter, so a constant answer does."""
    with constant_prometheus({f"{ip}:9100": 40.0 + i for i, ip in enumerate(NODE_IPS.values())}) as prom:
        yield prom


def annotator_cluster(fake: FakeKube) -> None:
    for name, ip in NODE_IPS.items():
        node = make_node(name)
        node["status"]["addresses"].insert(0, {"type": "InternalIP", "address": ip})
        fake.add(node)
    for i in range(3):
        bind_pod(fake, f"web-{i}", "w1", time.time() - 10)


def annotator_args(prom_url: str, kubeconfig: Path, tmp_path: Path, *extra: str) -> Any:
    """The Deployment's own arguments, pointed at the fake, the stub Prometheus and short leases."""
    c = ballast_container(
        workload("Deployment", "ballast-annotator")["spec"]["template"]["spec"], "annotator"
    )
    args = replace_flag(c["args"], "--prometheus-url", prom_url)
    args = replace_flag(args, "--policy", str(policy_file(tmp_path)))
    namespace, _ = service_account("Deployment", "ballast-annotator")
    args += [
        "--kubeconfig",
        str(kubeconfig),
        "--lease-namespace",  # in a pod: the service account's namespace, read from its token mount
        namespace,
        "--lease-duration",
        "2s",
        "--renew-deadline",
        "1500ms",
        "--retry-period",
        "250ms",
        "--metrics-port",
        "0",
        "--prometheus-retries",
        "0",
        *extra,
    ]
    return cli.build_parser().parse_args(args)


def run_annotator_until(args: Any, done: Callable[[], bool]) -> None:
    from ballast.annotator.run import run

    stop = threading.Event()
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(run(args, stop=stop)), daemon=True)
    thread.start()
    try:
        wait_for(done, timeout=10.0, what="the annotator to annotate", interval=0.02)
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive(), "the annotator did not stop"
    assert codes == [0]


def annotated(fake: FakeKube) -> bool:
    """Load on both nodes, and the hot value on w1 (w2 had no bindings: nothing to write there)."""
    notes = {n: (fake.get("nodes", n) or {}).get("metadata", {}).get("annotations") or {} for n in NODE_IPS}
    return all("cpu_usage_avg_5m" in v for v in notes.values()) and "node_hot_value" in notes["w1"]


def lease_held(fake: FakeKube) -> bool:
    lease = fake.get("leases", "ballast-annotator", namespace=NAMESPACE) or {}
    return bool((lease.get("spec") or {}).get("holderIdentity"))


def annotator_calls(
    fake: FakeKube, prom: StubPrometheus, kubeconfig: Path, tmp_path: Path, *extra: str
) -> set[ApiCall]:
    """Run mode until it annotated both nodes under its Lease (then it releases the Lease), then --once."""
    annotator_cluster(fake)
    run_annotator_until(
        annotator_args(prom.url, kubeconfig, tmp_path, *extra),
        lambda: annotated(fake) and lease_held(fake) and fake.open_watches() >= 2,
    )
    assert not lease_held(fake), "the Lease was not released at shutdown"
    from ballast.annotator.run import run

    once = annotator_args(prom.url, kubeconfig, tmp_path, "--once", "--leader-elect", *extra)
    assert run(once) == 0
    return calls_from(fake.requests)


def test_annotator_rbac_is_exactly_what_the_annotator_calls(
    fake_kube: FakeKube, prometheus: StubPrometheus, kubeconfig: Path, tmp_path: Path
) -> None:
    calls = annotator_calls(fake_kube, prometheus, kubeconfig, tmp_path)
    assert ApiCall("patch", "", "nodes", "", "", "w1") in calls
    assert ApiCall("watch", "", "pods") in calls
    bindings = grants_for(DOCS, *service_account("Deployment", "ballast-annotator"))
    assert bindings.builtin == []
    result = audit(calls, bindings.grants, EXEMPT)
    assert not result.denied and not result.unused, explain(result)


def test_annotator_events_mode_needs_exactly_the_optional_grant(
    fake_kube: FakeKube, prometheus: StubPrometheus, kubeconfig: Path, tmp_path: Path
) -> None:
    calls = annotator_calls(fake_kube, prometheus, kubeconfig, tmp_path, "--binding-source", "both")
    account = service_account("Deployment", "ballast-annotator")
    base = grants_for(DOCS, *account).grants
    assert audit(calls, base).denied == [ApiCall("list", "", "events"), ApiCall("watch", "", "events")]
    optional = grants_for([*DOCS, *load_documents(OPTIONAL / "annotator-events-rbac.yaml")], *account).grants
    result = audit(calls, optional)
    assert not result.denied and not result.unused, explain(result)


# ---------------------------------------------------------------------------------------------- agent

NODE = "worker-1"


def agent_args(kubeconfig: Path, tmp_path: Path, *extra: str) -> Any:
    """The DaemonSet's own arguments, with this test's sysfs tree, kubelet config and state file."""
    c = ballast_container(workload("DaemonSet", "ballast-agent")["spec"]["template"]["spec"], "agent")
    args = replace_flag(c["args"], "--sysfs", str(write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT)))
    args = replace_flag(args, "--result-key-file", str(result_key_file(tmp_path)))
    args = replace_flag(args, "--policy", str(policy_file(tmp_path)))
    args = replace_flag(args, "--cgroup-root", "/sys/fs/cgroup")  # this machine's, read only
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text("kubeReserved: {cpu: '1'}\n")
    args += [
        "--kubeconfig",
        str(kubeconfig),
        "--cpu-state-file",
        str(tmp_path / "cpu_manager_state"),
        "--metrics-port",
        "0",
        "--resync",
        "50ms",
        "--load-sample-interval",
        "50ms",
        "--load-report-interval",
        "200ms",
        *extra,
    ]
    if "--kubelet-configz" not in extra:
        args += ["--kubelet-config", str(kubelet)]
    return cli.build_parser().parse_args(args)


def run_agent_until(args: Any, done: Callable[[], Any]) -> None:
    from ballast.agent.cpumanager.runtime import MemoryRuntime
    from ballast.agent.run import run

    stop = threading.Event()
    codes: list[int] = []
    thread = threading.Thread(
        target=lambda: codes.append(run(args, stop=stop, runtime_factory=MemoryRuntime)), daemon=True
    )
    thread.start()
    try:
        wait_for(done, timeout=10.0, what="the agent", interval=0.02)
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive(), "the agent did not stop"
    assert codes == [0]


@pytest.fixture
def node_name_env(monkeypatch: pytest.MonkeyPatch) -> str:
    """NODE_NAME as the DaemonSet sets it from the downward API."""
    env = workload("DaemonSet", "ballast-agent")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in env
    monkeypatch.setenv("NODE_NAME", NODE)
    return NODE


def register_nodeloads(fake: FakeKube) -> None:
    """The NodeLoad CRD (scheduler_config/crd-nodeload.yaml), with its status subresource."""
    fake.register_custom_resource("ballast.io", "v1alpha1", "nodeloads", "NodeLoad", status_subresource=True)


def load_reported(fake: FakeKube) -> bool:
    """The agent's load report reached the API: its Node's load annotations and its NodeLoad's status."""
    node = fake.get("nodes", NODE) or {}
    nodeload = fake.get("nodeloads.ballast.io", NODE) or {}
    return "cpu_usage_avg_5m" in (node.get("metadata", {}).get("annotations") or {}) and bool(
        nodeload.get("status")
    )


def test_agent_rbac_is_exactly_what_the_agent_calls(
    fake_kube: FakeKube, kubeconfig: Path, tmp_path: Path, node_name_env: str
) -> None:
    """Publish (create, then patch on a label change), the CPU manager's pod watch, the Node read, and the
    load report (--report-load): its Node's annotations, its NodeLoad created once, then its status."""
    register_nodeloads(fake_kube)
    fake_kube.add(make_node(NODE))
    # Hold the Node watch's first list back: the first publish then reads the Node itself (GET).
    fake_kube.delay_next("GET", r"^/api/v1/nodes$", 1.0, watch=False)
    state: dict[str, bool] = {}

    def progressed() -> bool:
        nrt = fake_kube.get("noderesourcetopologies", NODE)
        if nrt is None or not fake_kube.find_requests("GET", "^/api/v1/pods$", watch=True):
            return False
        if not state.get("relabelled"):
            fake_kube.patch("nodes", NODE, {"metadata": {"labels": {AWARENESS_KEY: "false"}}})
            state["relabelled"] = True
            return False
        return bool(fake_kube.find_requests("PATCH", f"noderesourcetopologies/{NODE}$")) and load_reported(
            fake_kube
        )

    run_agent_until(agent_args(kubeconfig, tmp_path), progressed)
    calls = calls_from(fake_kube.requests)
    assert ApiCall("get", "", "nodes", "", "", NODE) in calls
    assert ApiCall("watch", "", "nodes", "", "", NODE) in calls  # fieldSelector metadata.name=<node>
    assert ApiCall("create", "topology.crane.io", "noderesourcetopologies") in calls
    assert ApiCall("patch", "", "nodes", "", "", NODE) in calls
    assert ApiCall("create", "ballast.io", "nodeloads") in calls
    assert ApiCall("patch", "ballast.io", "nodeloads", "status", "", NODE) in calls
    bindings = grants_for(DOCS, *service_account("DaemonSet", "ballast-agent"))
    assert bindings.builtin == []
    result = audit(calls, bindings.grants, EXEMPT)
    assert not result.denied and not result.unused, explain(result)


def test_agent_configz_mode_needs_exactly_the_optional_grant(
    fake_kube: FakeKube, kubeconfig: Path, tmp_path: Path, node_name_env: str
) -> None:
    fake_kube.add(make_node(NODE))
    fake_kube.set_configz(NODE, {"kubeletconfig": {"kubeReserved": {"cpu": "1"}}})
    run_agent_until(
        agent_args(kubeconfig, tmp_path, "--kubelet-configz", "--cpu-manager", "off"),
        lambda: fake_kube.get("noderesourcetopologies", NODE),
    )
    calls = calls_from(fake_kube.requests)
    account = service_account("DaemonSet", "ballast-agent")
    base = grants_for(DOCS, *account).grants
    assert audit(calls, base).denied == [ApiCall("get", "", "nodes", "proxy", "", NODE)]
    with_configz = grants_for(
        [*DOCS, *load_documents(OPTIONAL / "agent-kubelet-configz-rbac.yaml")], *account
    )
    configz = [g for g in with_configz.grants if g.role_name == "ballast-agent-kubelet-configz"]
    result = audit(calls, with_configz.grants, {p: "" for g in base for p in g.permissions()})
    assert not result.denied and not result.unused, explain(result)
    assert configz and all(any(p.used_by(c) for c in calls) for g in configz for p in g.permissions())


def test_agent_community_publishing_needs_the_optional_grant(
    fake_kube: FakeKube, kubeconfig: Path, tmp_path: Path, node_name_env: str
) -> None:
    fake_kube.register_custom_resource(
        "topology.node.k8s.io", "v1alpha2", "noderesourcetopologies", "NodeResourceTopology"
    )
    fake_kube.add(make_node(NODE))
    run_agent_until(
        agent_args(kubeconfig, tmp_path, "--publish", "crane,community", "--cpu-manager", "off"),
        lambda: fake_kube.get("noderesourcetopologies.topology.node.k8s.io", NODE),
    )
    calls = calls_from(fake_kube.requests)
    account = service_account("DaemonSet", "ballast-agent")
    base = grants_for(DOCS, *account).grants
    assert ApiCall("create", "topology.node.k8s.io", "noderesourcetopologies") in audit(calls, base).denied
    extra = load_documents(OPTIONAL / "agent-community-nrt-rbac.yaml")
    granted = grants_for([*DOCS, *extra], *account).grants
    result = audit(calls, granted, {p: "" for g in base for p in g.permissions()})
    assert not result.denied, explain(result)
    ours = [g for g in granted if g.role_name == "ballast-agent-community-nrt"]
    used = {p.verb for g in ours for p in g.permissions() if any(p.used_by(c) for c in calls)}
    assert used >= {"get", "create"}  # patch follows once the object exists and differs


# ----------------------------------------------------------------------------------------- rebalancer


def rebalancer_args(kubeconfig: Path, policy: Path, *extra: str) -> Any:
    """The Deployment's own arguments (without --dry-run unless asked), pointed at the fake."""
    c = ballast_container(
        workload("Deployment", "ballast-rebalancer")["spec"]["template"]["spec"], "rebalancer"
    )
    args = [a for a in replace_flag(c["args"], "--policy", str(policy)) if a != "--dry-run"]
    namespace, _ = service_account("Deployment", "ballast-rebalancer")
    args += ["--kubeconfig", str(kubeconfig), "--lease-namespace", namespace, "--interval", "100ms",
             "--lease-duration", "2s", "--renew-deadline", "1500ms", "--retry-period", "250ms",
             "--metrics-port", "0", *extra]  # fmt: skip
    return cli.build_parser().parse_args(args)


def rebalancer_calls(fake: FakeKube, kubeconfig: Path, tmp_path: Path) -> set[ApiCall]:
    """Run mode, real then dry, on the shipped policy with a spec.rebalance added, until each has made an
    eviction call (real) or written an Event (dry). The fake answers evictions 404 (it does not serve the
    subresource); what the authorizer sees is the call."""
    import yaml

    from ballast.rebalancer.run import run

    policy = policy_file(tmp_path)
    doc = yaml.safe_load(policy.read_text())
    doc["spec"]["rebalance"] = {
        "thresholds": [{"name": "cpu_usage_avg_5m", "high": 0.8, "low": 0.45}], "consecutiveAbnormal": 1,
    }  # fmt: skip
    policy.write_text(yaml.safe_dump(doc))
    fake.register_custom_resource("ballast.io", "v1alpha1", "nodeloads", "NodeLoad", status_subresource=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for name, load in (("hot", 0.95), ("cool", 0.10)):
        fake.add(make_node(name, cpu="8", annotations={"cpu_usage_avg_5m": f"{load},{stamp}"}))
    pod = make_pod("web-1", node_name="hot", cpu="1")
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                           "uid": "u", "controller": True}]  # fmt: skip
    fake.add(pod)
    for extra, done in (
        ((), lambda: bool(fake.find_requests("POST", "/eviction"))),
        (("--dry-run",), lambda: bool(fake.list("events"))),
    ):
        stop = threading.Event()
        codes: list[int] = []
        args = rebalancer_args(kubeconfig, policy, *extra)
        target = lambda a=args, s=stop, c=codes: c.append(run(a, stop=s))  # noqa: E731
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        try:
            wait_for(done, timeout=10.0, what="the rebalancer to act", interval=0.02)
        finally:
            stop.set()
            thread.join(15)
        assert codes == [0]
    return calls_from(fake.requests)


def test_rebalancer_rbac_is_exactly_what_the_rebalancer_calls(
    fake_kube: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    calls = rebalancer_calls(fake_kube, kubeconfig, tmp_path)
    assert ApiCall("create", "", "pods", "eviction", "default", "web-1") in calls
    assert ApiCall("create", "", "events", "", "default") in calls
    assert ApiCall("watch", "", "pods") in calls and ApiCall("watch", "", "nodes") in calls
    assert ApiCall("watch", "ballast.io", "nodeloads") in calls
    bindings = grants_for(DOCS, *service_account("Deployment", "ballast-rebalancer"))
    assert bindings.builtin == []
    result = audit(calls, bindings.grants, EXEMPT)
    assert not result.denied and not result.unused, explain(result)


def test_every_rbac_object_belongs_to_a_component() -> None:
    """No Role, ClusterRole or binding in the manifests that the tests above do not audit."""
    audited = {
        service_account("Deployment", "ballast-scheduler"),
        service_account("Deployment", "ballast-annotator"),
        service_account("Deployment", "ballast-rebalancer"),
        service_account("DaemonSet", "ballast-agent"),
    }
    docs = [*DOCS, *(d for p in sorted(OPTIONAL.glob("*.yaml")) for d in load_documents(p))]
    for d in docs:
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            subjects = {(s.get("namespace"), s["name"]) for s in d["subjects"]}
            assert subjects <= audited, f"{d['kind']} {d['metadata']['name']} binds {subjects - audited}"
    bound = {
        (d["roleRef"]["kind"], d["roleRef"]["name"])
        for d in docs
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
    }
    for d in docs:
        if d["kind"] in ("Role", "ClusterRole"):
            assert (d["kind"], d["metadata"]["name"]) in bound, (
                f"{d['kind']} {d['metadata']['name']} is unbound"
            )


# ------------------------------------------------------------------------- the RBAC model itself


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/nodes", {}, ApiCall("list", "", "nodes")),
        ("GET", "/api/v1/nodes", {"watch": "true"}, ApiCall("watch", "", "nodes")),
        (
            "GET",
            "/api/v1/nodes",
            {"watch": "1", "fieldSelector": "metadata.name=n1"},
            ApiCall("watch", "", "nodes", "", "", "n1"),
        ),
        ("GET", "/api/v1/pods", {"fieldSelector": "spec.nodeName=n1"}, ApiCall("list", "", "pods")),
        ("GET", "/api/v1/nodes/n1", {}, ApiCall("get", "", "nodes", "", "", "n1")),
        ("GET", "/api/v1/nodes/n1/proxy/configz", {}, ApiCall("get", "", "nodes", "proxy", "", "n1")),
        (
            "POST",
            "/api/v1/namespaces/a/pods/p/binding",
            {},
            ApiCall("create", "", "pods", "binding", "a", "p"),
        ),
        ("PATCH", "/api/v1/namespaces/a/pods/p", {}, ApiCall("patch", "", "pods", "", "a", "p")),
        (
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/a/leases/l",
            {},
            ApiCall("update", "coordination.k8s.io", "leases", "", "a", "l"),
        ),
        (
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/a/leases",
            {},
            ApiCall("create", "coordination.k8s.io", "leases", "", "a"),
        ),
        ("DELETE", "/api/v1/namespaces/a/pods", {}, ApiCall("deletecollection", "", "pods", "", "a")),
        (
            "DELETE",
            "/apis/topology.crane.io/v1alpha1/noderesourcetopologies/n1",
            {},
            ApiCall("delete", "topology.crane.io", "noderesourcetopologies", "", "", "n1"),
        ),
    ],
)
def test_api_call_maps_requests_like_the_api_server(
    method: str, path: str, query: dict[str, str], expected: ApiCall
) -> None:
    assert api_call(method, path, query) == expected


def grant(rule: dict[str, list[str]], namespace: str = "", kind: str = "ClusterRole") -> Grant:
    return grants_for(
        [
            {"kind": kind, "metadata": {"name": "r", "namespace": namespace}, "rules": [rule]},
            {
                "kind": "RoleBinding" if namespace else "ClusterRoleBinding",
                "metadata": {"name": "b", "namespace": namespace},
                "roleRef": {"kind": kind, "name": "r", "apiGroup": "rbac.authorization.k8s.io"},
                "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}],
            },
        ],
        "ns",
        "sa",
    ).grants[0]


@pytest.mark.parametrize(
    ("rule", "namespace", "call", "allowed"),
    [
        (
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            "",
            ApiCall("get", "", "pods", "", "x", "p"),
            True,
        ),
        (
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            "",
            ApiCall("list", "", "pods"),
            False,
        ),
        # a subresource needs its own entry: pods does not cover pods/binding
        (
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
            "",
            ApiCall("create", "", "pods", "binding", "x", "p"),
            False,
        ),
        (
            {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
            "",
            ApiCall("create", "", "pods", "binding", "x", "p"),
            True,
        ),
        (
            {"apiGroups": ["apps"], "resources": ["pods"], "verbs": ["get"]},
            "",
            ApiCall("get", "", "pods", "", "x", "p"),
            False,
        ),
        (
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            "",
            ApiCall("patch", "g", "things", "status", "", "t"),
            True,
        ),
        # a Role only counts in its namespace
        (
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            "ns",
            ApiCall("get", "", "pods", "", "other", "p"),
            False,
        ),
        (
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            "ns",
            ApiCall("get", "", "pods", "", "ns", "p"),
            True,
        ),
        # resourceNames: only named requests match; create never has a name
        (
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["a"]},
            "",
            ApiCall("get", "", "pods", "", "x", "b"),
            False,
        ),
        (
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"], "resourceNames": ["a"]},
            "",
            ApiCall("create", "", "pods", "", "x"),
            False,
        ),
    ],
)
def test_grant_allows_like_the_rbac_authorizer(
    rule: dict[str, list[str]], namespace: str, call: ApiCall, allowed: bool
) -> None:
    kind = "Role" if namespace else "ClusterRole"
    assert grant(rule, namespace, kind).allows(call) is allowed


def test_audit_reports_missing_and_extra_permissions() -> None:
    g = grant({"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list", "watch", "delete"]})
    calls = [
        ApiCall("list", "", "nodes"),
        ApiCall("watch", "", "nodes"),
        ApiCall("patch", "", "nodes", "", "", "n"),
    ]
    result = audit(calls, [g])
    assert result.denied == [ApiCall("patch", "", "nodes", "", "", "n")]
    assert [(p.resource, p.verb) for p in result.unused] == [
        ("nodes", "delete"),
        ("pods", "delete"),
        ("pods", "list"),
        ("pods", "watch"),
    ]
    exempt = {p: "reason" for p in result.unused}
    assert audit(calls, [g], exempt).unused == []
