"""The bind path against the real kube-apiserver v1.36: no way through ``/bind`` overfills a node or a zone.

The extender runs in-process (``create_app`` with a ``Kube`` on the loopback API server) and the test plays
kube-scheduler: it calls ``/bind`` the ways a real scheduler can (twice for one pod after a timeout, many at
once, without a UID), while the API server's answers (409 "already assigned", resourceVersion conflicts)
are the real ones.

Load numbers, with the shipped policy (cpu_usage_avg_5m limit 0.65, cpu estimate 85 % of the request): a
node of 8 CPUs annotated at 0.40 takes two 1-CPU pods (0.40 + 2 x 0.10625 = 0.6125) and refuses a third.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from ballast.extender.main import create_app
from ballast.kube.client import Kube, load_api_client
from ballast.model.policy import load_policy
from ballast.testing.controlplane import (
    ControlPlane,
    bound_pods,
    create_nodes,
    node_body,
    pod_body,
    wait_until,
)
from ballast.testing.fakekube import make_nrt

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "scheduler_config" / "policy.yaml"
CRD = ROOT / "scheduler_config" / "crd-noderesourcetopology.yaml"
SCHEDULER = "ballast-scheduler"
TOPOLOGY_RESULT = "topology.crane.io/topology-result"


def load(value: float, ahead: timedelta = timedelta(0)) -> dict[str, str]:
    stamp = (datetime.now(UTC) + ahead).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"cpu_usage_avg_5m": f"{value:.5f},{stamp}"}


API_TIMEOUT = 2.0


@pytest.fixture
def extender(cluster: ControlPlane) -> Iterator[tuple[TestClient, Any]]:
    cluster.kubectl("apply", "-f", str(CRD))
    cluster.kubectl("wait", "--for", "condition=Established", "--timeout", "120s", "-f", str(CRD))
    kube = Kube(load_api_client(str(cluster.kubeconfig)), timeout=API_TIMEOUT)
    app = create_app(load_policy(POLICY), kube=kube, policy_poll_seconds=0, access_log=False)
    with TestClient(app) as client:
        assert app.state.services.cache.wait_synced(60)
        yield client, app
    cluster.kubectl("delete", "noderesourcetopologies", "--all", check=False)


def create_pods(cluster: ControlPlane, names: list[str], **kwargs: Any) -> dict[str, str]:
    """Create pods of the Ballast scheduler; return name -> uid."""
    core = cluster.core()
    out = {}
    for name in names:
        pod = core.create_namespaced_pod("default", pod_body(name, scheduler_name=SCHEDULER, **kwargs))
        out[name] = pod.metadata.uid
    return out


def bind(client: TestClient, name: str, uid: str, node: str) -> str:
    body = {"PodName": name, "PodNamespace": "default", "PodUID": uid, "Node": node}
    r = client.post("/bind", json=body)
    assert r.status_code == 200, r.text
    return r.json()["Error"]


def node_seen(app: Any, name: str, samples: bool = True) -> None:
    cache = app.state.services.cache
    wait_until(
        lambda: cache.node(name) is not None and (not samples or cache.node(name).samples),
        None,
        f"the extender's cache holding node {name}",
    )


def placed(client: TestClient, node: str) -> list[str]:
    pods = client.get(f"/nodes/{node}").json()["estimation"]["pods"]
    return sorted(p["pod"] for p in pods if not p["tentative"])


def test_a_second_bind_of_a_bound_pod_changes_nothing(cluster: ControlPlane, extender) -> None:
    """kube-scheduler retries a bind that timed out: the API answers 409 "already assigned". That second
    bind must keep what the first recorded, so the node's limit still holds for every later pod."""
    client, app = extender
    create_nodes(cluster.core(), [node_body("full", annotations=load(0.40))])
    node_seen(app, "full")
    uids = create_pods(cluster, [f"twice-{i}" for i in range(6)], requests={"cpu": "1"})
    answers = []
    for name, uid in uids.items():
        answers.append((bind(client, name, uid, "full"), bind(client, name, uid, "full")))
    bound = bound_pods(cluster.core())
    assert sorted(bound) == ["twice-0", "twice-1"], (bound, answers)
    # the retry of a bind that succeeded answers success (same node), and refused ones stay refused
    assert answers[0] == ("", "") and answers[1] == ("", ""), answers
    assert all(first and second for first, second in answers[2:]), answers
    assert placed(client, "full") == ["default/twice-0", "default/twice-1"]
    # a bind of a bound pod to another node is an error and moves nothing
    create_nodes(cluster.core(), [node_body("other", annotations=load(0.10))])
    node_seen(app, "other")
    err = bind(client, "twice-0", uids["twice-0"], "other")
    assert "already" in err and "full" in err, err
    assert placed(client, "full") == ["default/twice-0", "default/twice-1"]
    assert placed(client, "other") == []


def _numa_node(cluster: ControlPlane, app: Any, name: str, zones: int, cpus: int) -> None:
    zone = {"capacity": {"cpu": str(cpus)}, "allocatable": {"cpu": str(cpus)}}
    zone_list = [{"name": f"node{i}", "type": "Node", "resources": zone} for i in range(zones)]
    nrt = make_nrt(name, zones=zone_list)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(nrt))
    create_nodes(cluster.core(), [node_body(name, cpu=str(zones * cpus))])
    cache = app.state.services.cache
    wait_until(lambda: cache.topology(name) is not None, None, f"the extender's cache holding {name}'s NRT")


def test_a_second_bind_never_touches_a_bound_pods_topology_result(cluster: ControlPlane, extender) -> None:
    client, app = extender
    _numa_node(cluster, app, "numa", zones=2, cpus=4)
    exact = {"cpu": "3", "memory": "1Gi"}
    uids = create_pods(cluster, ["kafka-0"], requests=exact, limits=exact)
    assert bind(client, "kafka-0", uids["kafka-0"], "numa") == ""
    core = cluster.core()
    first = dict(core.read_namespaced_pod("kafka-0", "default").metadata.annotations)
    assert TOPOLOGY_RESULT in first
    cache = app.state.services.cache
    wait_until(lambda: sum(cache.zone_usage("numa").cpu_milli.values()) == 3000, None, "the result counted")
    second = bind(client, "kafka-0", uids["kafka-0"], "numa")
    time.sleep(0.5)  # let any patch the second bind made reach the watch
    assert dict(core.read_namespaced_pod("kafka-0", "default").metadata.annotations) == first
    assert sum(cache.zone_usage("numa").cpu_milli.values()) == 3000
    assert second == ""  # the retry of a bind that landed on this node: success


def test_a_load_stamp_ahead_of_the_clock_keeps_the_bind_check(cluster: ControlPlane, extender) -> None:
    """An annotator whose clock runs 120 s ahead: its measurement cannot include pods bound now, so their
    estimates count; 100 concurrent binds onto a node with room for two bind exactly two."""
    client, app = extender
    create_nodes(cluster.core(), [node_body("skewed", annotations=load(0.40, ahead=timedelta(seconds=120)))])
    node_seen(app, "skewed")
    uids = create_pods(cluster, [f"skew-{i}" for i in range(100)], requests={"cpu": "1"})
    with ThreadPoolExecutor(16) as pool:
        errors = list(pool.map(lambda kv: bind(client, kv[0], kv[1], "skewed"), uids.items()))
    assert len(bound_pods(cluster.core())) == 2, [e for e in errors if e][:3]
    assert sum(1 for e in errors if not e) == 2
    metrics = client.get("/metrics").text
    assert 'ballast_extender_annotations_ahead_total{metric="cpu_usage_avg_5m"}' in metrics


def test_a_bind_without_a_uid_is_checked_like_any_other(cluster: ControlPlane, extender) -> None:
    client, app = extender
    create_nodes(cluster.core(), [node_body("nouid", annotations=load(0.40))])
    node_seen(app, "nouid")
    names = [f"anon-{i}" for i in range(10)]
    create_pods(cluster, names, requests={"cpu": "1"})
    with ThreadPoolExecutor(8) as pool:
        errors = list(pool.map(lambda name: bind(client, name, "", "nouid"), names))
    assert len(bound_pods(cluster.core())) == 2, errors
    assert sum(1 for e in errors if not e) == 2
    assert len(placed(client, "nouid")) == 2


@contextmanager
def frozen(cluster: ControlPlane) -> Iterator[None]:
    """kube-apiserver stopped (SIGSTOP): connections open, nothing answers, as in an overloaded server."""
    assert cluster.apiserver is not None
    pid = cluster.apiserver.proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_bind_answers_within_the_api_timeout_when_the_api_server_freezes(
    cluster: ControlPlane, extender
) -> None:
    """kube-scheduler gives up on a bind after its httpTimeout and retries it: a bind whose API calls
    cannot finish must answer an error within ``--api-timeout`` (one deadline for the whole verb, no
    retries hidden in the HTTP client), for a plain pod and for a NUMA pod (a GET and a patch first)."""
    client, app = extender
    create_nodes(cluster.core(), [node_body("slow", annotations=load(0.10))])
    node_seen(app, "slow")
    _numa_node(cluster, app, "slow-numa", zones=2, cpus=4)
    exact = {"cpu": "2", "memory": "1Gi"}
    plain = create_pods(cluster, ["plain"], requests={"cpu": "1"})
    numa = create_pods(cluster, ["pinned"], requests=exact, limits=exact)
    timings = {}
    with frozen(cluster):
        for name, uid, node in (("plain", plain["plain"], "slow"), ("pinned", numa["pinned"], "slow-numa")):
            start = time.monotonic()
            err = bind(client, name, uid, node)
            timings[name] = time.monotonic() - start
            assert err, f"{name}: a bind with the API server frozen cannot succeed"
    assert all(t < API_TIMEOUT + 1.0 for t in timings.values()), timings


def test_a_bind_waiting_for_the_api_server_holds_up_no_other_verb(cluster: ControlPlane, extender) -> None:
    """The bind awaits its API calls on the event loop that serves every verb: while its Binding waits on a
    frozen API server, filter and prioritize (answered from the cache) come back at once. A bind that
    blocked the loop would hold them for the whole ``--api-timeout``."""
    client, app = extender
    create_nodes(cluster.core(), [node_body("waiting", annotations=load(0.10))])
    node_seen(app, "waiting")
    uids = create_pods(cluster, ["stuck", "next"], requests={"cpu": "100m"})
    following = cluster.core().read_namespaced_pod("next", "default")
    args = {
        "Pod": cluster.core().api_client.sanitize_for_serialization(following),
        "NodeNames": ["waiting"],
    }
    with frozen(cluster), ThreadPoolExecutor(1) as pool:
        start = time.monotonic()
        pending = pool.submit(bind, client, "stuck", uids["stuck"], "waiting")
        time.sleep(0.3)  # the bind is in its Binding call now
        answers = []
        for verb in ("/filter", "/prioritize", "/filter", "/prioritize"):
            asked = time.monotonic()
            r = client.post(verb, json=args)
            answers.append((verb, r.status_code, time.monotonic() - asked))
        assert not pending.done(), "the bind should still be waiting for the frozen API server"
        err = pending.result(timeout=API_TIMEOUT + 5)
        waited = time.monotonic() - start
    assert all(code == 200 and took < 0.5 for _, code, took in answers), answers
    assert err and waited < API_TIMEOUT + 1.0, (err, waited)


def test_concurrent_numa_binds_of_an_untrusted_scheduler_never_overfill_a_zone(
    cluster: ControlPlane, extender
) -> None:
    """With one kube-scheduler serving several profiles, the extender binds pods of schedulers whose
    results the agent does not trust; the agent still pins them. Each bind's result must count until the
    NRT shows what the agent holds: six 4-CPU pods onto two 8-CPU zones bind four, never six."""
    client, app = extender
    _numa_node(cluster, app, "untrusted", zones=2, cpus=8)
    exact = {"cpu": "4", "memory": "1Gi"}
    core = cluster.core()
    uids = {}
    for i in range(6):
        body = pod_body(f"other-{i}", scheduler_name="other-scheduler", requests=exact, limits=exact)
        uids[f"other-{i}"] = core.create_namespaced_pod("default", body).metadata.uid
    with ThreadPoolExecutor(6) as pool:
        errors = list(pool.map(lambda kv: bind(client, kv[0], kv[1], "untrusted"), uids.items()))
    assert sum(1 for e in errors if not e) == 4, errors
    time.sleep(1)  # the annotations arrive through the watch; the zones must still count them
    usage = app.state.services.cache.zone_usage("untrusted")
    assert usage.cpu_milli == {"node0": 8000, "node1": 8000}, usage
    r = client.post(
        "/filter",
        json={
            "Pod": core.api_client.sanitize_for_serialization(core.read_namespaced_pod("other-5", "default")),
            "NodeNames": ["untrusted"],
        },
    ).json()
    assert r["NodeNames"] == [] or r.get("FailedNodes"), r


def test_a_pod_the_agent_still_lists_after_it_went_takes_no_cpus(cluster: ControlPlane, extender) -> None:
    """The agent's NRT lists the pods it pins per zone (``ballast.io/exclusive-pods``), and an NRT written
    before a pod went still lists it. The extender counts a listed pod only while its pod watch shows it
    bound to that node: once the pod is deleted its 3 CPUs are free again, and a 2-CPU pod fits the 4-CPU
    zone, whatever the NRT still says."""
    client, app = extender
    zone = {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}}
    exact = {"cpu": "3", "memory": "1Gi"}
    create_nodes(cluster.core(), [node_body("pinned", cpu="4")])
    core = cluster.core()
    body = pod_body("held", requests=exact, limits=exact)
    body["spec"]["nodeName"] = "pinned"  # placed by another scheduler; the agent pins it
    held = core.create_namespaced_pod("default", body)
    listing = {"ballast.io/exclusive-pods": f"{held.metadata.uid}=3"}
    nrt = make_nrt(
        "pinned", zones=[{"name": "node0", "type": "Node", "resources": zone, "attributes": listing}]
    )
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(nrt))
    cache = app.state.services.cache
    wait_until(
        lambda: cache.zone_usage("pinned").cpu_milli == {"node0": 3000}, None, "the listed pod counted"
    )
    core.delete_namespaced_pod("held", "default", grace_period_seconds=0)
    wait_until(
        lambda: cache.zone_usage("pinned").cpu_milli.get("node0", 0) == 0, None, "its CPUs free once it went"
    )
    two = {"cpu": "2", "memory": "1Gi"}
    uids = create_pods(cluster, ["after"], requests=two, limits=two)
    assert bind(client, "after", uids["after"], "pinned") == ""
