"""Extender and agent agree on which pods hold exclusive CPUs in which NUMA zones (issue 12, item 2).

Before, the extender counted the topology result of every pod on a node: a BestEffort pod from the default
scheduler with ``capacity.cpu: "100000"`` made every zone show free -99 996 CPUs and blocked all
Guaranteed pods there, while the agent ignored that pod. Both now decide through
``ballast.contract.exclusive``.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ballast.agent.cpumanager.policy_static import StaticPolicy
from ballast.agent.cpumanager.state import MemoryState
from ballast.agent.cpuset import CPUSet
from ballast.contract.pod import parse_pod
from ballast.contract.topology_result import (
    TOPOLOGY_RESULT_ANNOTATION,
    parse_topology_result,
    render_topology_result,
)
from ballast.extender.cache import pod_record
from ballast.extender.numa.crane import exclusive_zones, numa_request, parse_nrt
from ballast.model.podinfo import pod_info
from ballast.testing.fakekube import make_nrt
from ballast.testing.parts import wait_for
from tests.agent.kubelet_topologies import DUAL_SOCKET_HT
from tests.extender.test_numa import N1, guaranteed, numa, zones  # noqa: F401 (numa is a fixture)

TRUSTED = "ballast-scheduler"
RESULT = TOPOLOGY_RESULT_ANNOTATION


def forged(name: str) -> dict:
    """A BestEffort pod from the default scheduler whose result claims 100 000 CPUs in every zone."""
    result = [
        {"name": f"node{i}", "type": "Node", "resources": {"capacity": {"cpu": "100000"}}} for i in (0, 1)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "annotations": {RESULT: orjson.dumps(result).decode()},
        },
        "spec": {"nodeName": N1, "containers": [{"name": "app", "image": "x"}]},
        "status": {"phase": "Running"},
    }


def test_a_pod_the_agent_ignores_takes_nothing_from_a_zone(numa, fake_kube) -> None:  # noqa: F811
    client, app = numa
    cache = app.state.services.cache
    fake_kube.add(forged("forger"))
    wait_for(lambda: cache.pods_on(N1), what="the forged pod in the cache")
    usage = cache.zone_usage(N1)
    assert usage.cpu_milli.get("node0", 0) == 0 and usage.cpu_milli.get("node1", 0) == 0
    r = client.post("/filter", json={"Pod": guaranteed("g", 4), "NodeNames": [N1]}).json()
    assert r["NodeNames"] == [N1], r["FailedNodes"]
    zones_view = client.get(f"/nodes/{N1}").json()["numa"]["zones"]
    assert [z["freeCpuMilli"] for z in zones_view] == [8000, 8000]


# -- the property: same pods, same verdict ------------------------------------------------------------

NRT = parse_nrt(make_nrt(N1, zones=zones(6, 6)))  # DUAL_SOCKET_HT: 12 CPUs, NUMA 0 and 1
AGENT = StaticPolicy(DUAL_SOCKET_HT, CPUSet.of(0, 6), allowed_schedulers=[TRUSTED])

quantity = st.sampled_from(["1", "2", "3", "4", "500m", "1500m", "2.5", "0", "-1", "100000", "x", "1e3"])
resources = st.fixed_dictionaries(
    {},
    optional={
        "requests": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantity | st.just("1Gi")),
        "limits": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantity | st.just("1Gi")),
    },
)
memory = st.sampled_from(["1Gi", "512Mi", "x", "-1", "0.5"])
zone_entry = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["node0", "node1", "node2", "nodeX", "node00"]),
        "type": st.sampled_from(["Node", "Socket"]),
        "resources": st.fixed_dictionaries(
            {"capacity": st.fixed_dictionaries({"cpu": quantity}, optional={"memory": memory})}
        ),
    }
)
result_text = st.one_of(
    st.lists(zone_entry, max_size=3).map(lambda z: orjson.dumps(z).decode()),
    st.sampled_from(["", "[]", "not json", "{}"]),
)


@st.composite
def pods(draw) -> dict:
    same = draw(st.integers(0, 3)) > 0
    res = draw(resources)
    if same:  # mostly Guaranteed: requests equal to limits with cpu and memory
        cpu = draw(st.sampled_from(["1", "2", "3", "4"]) | quantity)
        res = {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"cpu": cpu, "memory": "1Gi"}}
    annotations = {}
    if same and draw(st.booleans()):  # a result that matches the pod's CPUs, in one zone or split
        cpu = res["requests"]["cpu"]
        split = draw(st.sampled_from([[("node0", cpu)], [("node1", cpu)], [("node0", "1"), ("node1", "1")]]))
        annotations[RESULT] = orjson.dumps(
            [{"name": z, "type": "Node", "resources": {"capacity": {"cpu": c}}} for z, c in split]
        ).decode()
    elif draw(st.booleans()):
        annotations[RESULT] = draw(result_text)
    policy = draw(st.sampled_from([None, "exclusive", "immovable", "numa", "none", "bogus"]))
    if policy is not None:
        annotations["topology.crane.io/cpu-policy"] = policy
    spec = {
        "nodeName": N1,
        "containers": [{"name": "app", "image": "x", "resources": res}],
    }
    scheduler = draw(st.sampled_from([None, TRUSTED, "default-scheduler"]))
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": annotations},
        "spec": spec,
        "status": {"phase": "Running"},
    }


@given(pod=pods())
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
def test_extender_and_agent_agree_on_exclusive_zones(pod: dict) -> None:
    decision = AGENT.decide(parse_pod(pod))
    agent_zones = (
        sorted((f"node{n}", cpus * 1000) for n, cpus in decision.zones)
        if decision.pins and decision.zones
        else None
    )
    record = pod_record(pod)
    assert record is not None
    # The cache reads a pod as the agent does only when it carries a result; without one it holds none.
    assert (record.spec is not None) == (RESULT in pod["metadata"]["annotations"])
    got = exclusive_zones(record.spec, NRT, frozenset([TRUSTED])) if record.spec is not None else None
    extender_zones = sorted((z, cpu) for z, cpu, _mem in got) if got is not None else None
    assert extender_zones == agent_zones


def test_the_generator_reaches_both_verdicts() -> None:
    """The property is only worth something if some generated pods do hold zones (and some do not)."""
    pod = guaranteed("g", 4)
    pod["metadata"]["annotations"][RESULT] = orjson.dumps(
        [{"name": "node1", "type": "Node", "resources": {"capacity": {"cpu": "4"}}}]
    ).decode()
    held = exclusive_zones(parse_pod(pod), NRT, {TRUSTED})
    forged_pod = exclusive_zones(parse_pod(forged("f")), NRT, {TRUSTED})
    assert held == [("node1", 4000, 0)] and forged_pod is None


# -- one parser and renderer, one DaemonSet rule -------------------------------------------------------

rendered = st.lists(
    st.tuples(st.integers(0, 7), st.integers(1, 64), st.sampled_from([0, 2**20, 2**30, 3 * 2**30, 1000])),
    min_size=1,
    max_size=4,
    unique_by=lambda z: z[0],
)


@given(zones_=rendered)
def test_what_bind_writes_the_agent_reads_back(zones_: list[tuple[int, int, int]]) -> None:
    """Every result the extender's bind renders parses, with the same CPUs and memory per zone."""
    parsed = parse_topology_result(render_topology_result((f"node{n}", c, m) for n, c, m in zones_))
    assert parsed.cpus == tuple(sorted((n, c) for n, c, _ in zones_))
    assert parsed.memory == {n: m for n, _, m in zones_ if m}


def test_the_extender_counts_the_memory_of_the_result_the_agent_honours() -> None:
    pod = guaranteed("g", 4)
    pod["metadata"]["annotations"][RESULT] = render_topology_result((("node1", 4, 2**30),))
    assert exclusive_zones(parse_pod(pod), NRT, {TRUSTED}) == [("node1", 4000, 2**30)]
    pod["metadata"]["annotations"][RESULT] = orjson.dumps(
        [{"name": "node1", "type": "Node", "resources": {"capacity": {"cpu": "4", "memory": "lots"}}}]
    ).decode()
    assert AGENT.decide(parse_pod(pod)).zones is None
    assert exclusive_zones(parse_pod(pod), NRT, {TRUSTED}) is None


@pytest.mark.parametrize(
    ("owner", "daemonset"),
    [
        ({"kind": "DaemonSet", "name": "d", "controller": True}, True),
        ({"kind": "DaemonSet", "name": "d"}, False),  # an owner, not the controller
        ({"kind": "DaemonSet", "name": "d", "controller": False}, False),
        ({"kind": "ReplicaSet", "name": "r", "controller": True}, False),
    ],
)
def test_one_daemonset_rule_for_estimates_and_numa(owner: dict, daemonset: bool) -> None:
    """A pod is a DaemonSet pod by its controller ownerReference, for the load estimate and NUMA alike."""
    pod = guaranteed("g", 4)
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "uid": "o1", **owner}]
    assert pod_info(pod).daemonset is daemonset
    assert parse_pod(pod).daemonset is daemonset
    assert (numa_request(pod) is None) is daemonset


def _pinned_by_the_agent(pods: list[dict], key: bytes | None = None) -> tuple[MemoryState, dict[int, int]]:
    """Run the agent's own policy over ``pods`` (in order) and return its state and CPUs held per NUMA."""
    policy = StaticPolicy(DUAL_SOCKET_HT, CPUSet(), allowed_schedulers=[TRUSTED], result_key=key)
    state = MemoryState(DUAL_SOCKET_HT.all_cpus)
    for p in pods:
        info = parse_pod(p)
        decision = policy.decide(info)
        if decision.pins:
            allocation = policy.allocate(state, info, decision)
            assert allocation is not None, p["metadata"]["name"]
            allocation.apply(state)
    per_numa: dict[int, int] = {}
    for uid in state.get_assignments():
        for numa_id in DUAL_SOCKET_HT.numa_ids:
            per_numa[numa_id] = per_numa.get(numa_id, 0) + len(
                state.pod_cpus(uid) & DUAL_SOCKET_HT.cpus_in_numa(numa_id)
            )
    return state, per_numa


def test_extender_and_agent_agree_on_pods_without_a_trusted_result() -> None:
    """The pods the agent pins on its own choice: a Guaranteed pod of the default
    scheduler, a pod created with ``nodeName``, an unsealed result (with a key), a malformed result, a
    result of an untrusted scheduler. With the agent's assignments published per zone in the NRT, the
    extender counts exactly what the agent holds in every zone."""
    from ballast.agent.kubelet_config import KubeletSettings
    from ballast.agent.nrt.crane import build_nrt
    from ballast.extender.cache import ClusterCache
    from ballast.model.policy import load_policy
    from ballast.model.policy_store import PolicyStore
    from ballast.testing.parts import POLICY_FILE

    def pod(name: str, cpus: int, scheduler: str, result: str | None = None) -> dict:
        p = guaranteed(name, cpus)
        p["metadata"]["uid"] = f"uid-{name}"
        p["spec"]["schedulerName"] = scheduler
        p["spec"]["nodeName"] = N1
        p["status"] = {"phase": "Running"}
        if result is not None:
            p["metadata"]["annotations"][RESULT] = result
        return p

    good = render_topology_result((("node0", 2, 0),))
    pods = [
        pod("default", 2, "default-scheduler"),
        pod("direct", 1, "default-scheduler"),  # created with nodeName: no scheduler ever saw it
        pod("unsealed", 2, TRUSTED, good),  # with a key, an unsealed result is not trusted
        pod("malformed", 1, TRUSTED, "[{not json"),
        pod("untrusted", 2, "other-scheduler", good),
    ]
    key = b"k" * 32
    state, per_numa = _pinned_by_the_agent(pods, key)
    assert sum(per_numa.values()) == 8
    nrt = build_nrt(
        node_name=N1,
        node_uid="n1",
        topology=DUAL_SOCKET_HT,
        kubelet=KubeletSettings(),
        exclusive={uid: state.pod_cpus(uid) for uid in state.get_assignments()},
    )
    nrt["craneManagerPolicy"]["cpuManagerPolicy"] = "Static"
    cache = ClusterCache(None, PolicyStore(load_policy(POLICY_FILE)), result_key=key)  # type: ignore[arg-type]
    cache.topologies[N1] = parse_nrt(nrt)
    for p in pods:
        r = pod_record(p)
        cache.pods[r.uid] = r
        cache.pods_by_node.setdefault(N1, set()).add(r.uid)
    usage = cache.zone_usage(N1)
    assert {int(z[4:]): m // 1000 for z, m in usage.cpu_milli.items() if m} == {
        n: c for n, c in per_numa.items() if c
    }
    # and without the published assignments, none of these pods would count (the old disagreement)
    del nrt["zones"][0]["attributes"]
    cache.topologies[N1] = parse_nrt(nrt)
    cache.usage.clear()
    assert sum(cache.zone_usage(N1).cpu_milli.values()) == 0


def test_a_listed_pod_counts_only_while_bound_there_or_briefly_unseen() -> None:
    """What the agent's NRT lists counts only for pods the pod watch shows bound to that node; one it has
    not seen counts for ``HELD_GRACE_SECONDS`` (a lagging watch), then not; one seen to go, never."""
    from ballast.contract.topology_result import EXCLUSIVE_PODS_ATTRIBUTE, render_zone_pods
    from ballast.extender.cache import HELD_GRACE_SECONDS, ClusterCache, PodRecord
    from ballast.model.policy import load_policy
    from ballast.model.policy_store import PolicyStore
    from ballast.testing.parts import POLICY_FILE

    now = [1000.0]
    cache = ClusterCache(None, PolicyStore(load_policy(POLICY_FILE)), clock=lambda: now[0])  # type: ignore[arg-type]
    listing = render_zone_pods({"here": 1, "elsewhere": 1, "unseen": 1, "went": 1})
    zone = {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "8"}}
    nrt = make_nrt(N1, zones=[{"name": "node0", "type": "Node", "resources": zone,
                               "attributes": {EXCLUSIVE_PODS_ATTRIBUTE: listing}}])  # fmt: skip
    cache.topologies[N1] = parse_nrt(nrt)
    for uid, node in (("here", N1), ("elsewhere", "n2")):
        cache.pods[uid] = PodRecord(uid, "default", uid, node, None, None, {}, "ballast-scheduler")
        cache.pods_by_node.setdefault(node, set()).add(uid)
    cache.pod_gone("went")
    assert cache.zone_usage(N1).cpu_milli == {"node0": 2000}  # here, and unseen within its grace
    now[0] += HELD_GRACE_SECONDS - 1
    assert cache.zone_usage(N1).cpu_milli == {"node0": 2000}
    now[0] += 1
    assert cache.zone_usage(N1).cpu_milli == {"node0": 1000}  # the cached usage expired with the grace


def test_an_unseen_pods_grace_starts_when_the_nrt_listing_it_arrives() -> None:
    """The grace of a listed pod the pod watch has not seen runs from when the NRT watch first saw it
    listed, not from the first filter that looks at the node: a node first evaluated 270 s after its NRT
    arrived is not blocked 30 s more. A UID that a later NRT adds gets its own grace from then; one listed
    all along keeps its start through updates and a relist."""
    from ballast.contract.topology_result import EXCLUSIVE_PODS_ATTRIBUTE, render_zone_pods
    from ballast.extender.cache import HELD_GRACE_SECONDS, ClusterCache
    from ballast.model.policy import load_policy
    from ballast.model.policy_store import PolicyStore
    from ballast.testing.parts import POLICY_FILE

    now = [1000.0]
    cache = ClusterCache(None, PolicyStore(load_policy(POLICY_FILE)), clock=lambda: now[0])  # type: ignore[arg-type]
    (nrts,) = [r for r in cache.reflectors if r.name == "noderesourcetopologies"]

    def nrt(*uids: str) -> dict:
        zone = {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "8"}}
        attrs = {EXCLUSIVE_PODS_ATTRIBUTE: render_zone_pods(dict.fromkeys(uids, 1))}
        return make_nrt(N1, zones=[{"name": "node0", "type": "Node", "resources": zone, "attributes": attrs}])

    nrts.handler.apply("ADDED", nrt("old"))
    now[0] += 270
    assert cache.zone_usage(N1).cpu_milli == {}  # "old" was listed 270 s ago: its grace is long over
    nrts.handler.apply("MODIFIED", nrt("old", "new"))
    now[0] += HELD_GRACE_SECONDS - 1
    nrts.handler.replace([nrt("old", "new")], "2")  # a relist keeps when each was first seen
    assert cache.zone_usage(N1).cpu_milli == {"node0": 1000}  # "new", within its grace
    now[0] += 1
    assert cache.zone_usage(N1).cpu_milli == {}
    nrts.handler.apply("DELETED", nrt())
    nrts.handler.apply("ADDED", nrt("old"))  # a node's NRT made anew: its listing is new
    assert cache.zone_usage(N1).cpu_milli == {"node0": 1000}
