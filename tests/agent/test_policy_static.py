"""The static policy's decisions, table by table: eligibility, trust, NUMA zones, pools, reuse, validation."""

from __future__ import annotations

import pytest

from ballast.agent.cpumanager.policy_static import AllocationError, StateInvalidError, StaticPolicy
from ballast.agent.cpumanager.state import MemoryState
from ballast.agent.cpuset import CPUSet
from ballast.contract.exclusive import CPUPolicy
from ballast.contract.pod import parse_pod
from ballast.testing.cri_fake import SCHEDULER, container, pod, zones
from tests.agent.kubelet_topologies import (
    DUAL_SOCKET_HT,
    DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT,
    SINGLE_SOCKET_HT,
)

# DUAL_SOCKET_HT: 12 CPUs, NUMA/socket 0 = even CPUs, 1 = odd; core c = CPUs c and c+6.
NUMA0 = CPUSet.parse("0,2,4,6,8,10")
NUMA1 = CPUSet.parse("1,3,5,7,9,11")


def _policy(topology=DUAL_SOCKET_HT, reserved=CPUSet.of(0, 6), default="exclusive") -> StaticPolicy:
    return StaticPolicy(topology, reserved, allowed_schedulers=[SCHEDULER], default_policy=default)


def _fresh(policy: StaticPolicy) -> MemoryState:
    return MemoryState(policy.all_cpus)


def _allocate(policy: StaticPolicy, state: MemoryState, p: dict):
    info = parse_pod(p)
    decision = policy.decide(info)
    allocation = policy.allocate(state, info, decision)
    if allocation is not None:
        allocation.apply(state)
    return info, decision, allocation


def test_exclusive_takes_from_the_result_numa_zone_and_leaves_the_shared_pool() -> None:
    policy = _policy()
    state = _fresh(policy)
    info, decision, alloc = _allocate(
        policy, state, pod("p", [container("a", "4", "1Gi")], result=zones(node1=4))
    )
    assert decision.mode is CPUPolicy.EXCLUSIVE and decision.zones == ((1, 4),)
    assert alloc is not None and len(alloc.cpus) == 4 and alloc.cpus.issubset(NUMA1)
    assert alloc.cpus == CPUSet.parse("1,3,7,9"), "whole cores, lowest first (kubelet packing)"
    assert state.get_cpuset(info.uid, "a") == alloc.cpus
    assert state.get_default_cpuset() == policy.all_cpus - alloc.cpus
    policy.validate_state(state)


def test_result_split_over_two_zones() -> None:
    policy = _policy()
    state = _fresh(policy)
    _, _, alloc = _allocate(
        policy,
        state,
        pod("p", [container("a", "3", "1Gi"), container("b", "2", "1Gi")], result=zones(node0=2, node1=3)),
    )
    assert alloc is not None
    assert len(alloc.cpus & NUMA0) == 2 and len(alloc.cpus & NUMA1) == 3
    a, b = alloc.containers["a"], alloc.containers["b"]
    assert a.isdisjoint(b) and (a | b) == alloc.cpus and (len(a), len(b)) == (3, 2)


def test_reserved_cpus_are_never_handed_out() -> None:
    # NUMA 0 has 6 CPUs, two of them (0 and 6) reserved: 4 can be handed out, 5 cannot.
    policy = _policy(reserved=CPUSet.of(0, 6))
    _, _, alloc = _allocate(
        policy, _fresh(policy), pod("p", [container("a", "4", "1Gi")], result=zones(node0=4))
    )
    assert alloc is not None and alloc.cpus == NUMA0 - CPUSet.of(0, 6)
    with pytest.raises(AllocationError, match=r"NUMA node 0 has 4 allocatable CPU\(s\) \(2,4,8,10\)"):
        _allocate(policy, _fresh(policy), pod("q", [container("a", "5", "1Gi")], result=zones(node0=5)))


def test_reserved_cpus_are_never_handed_out_even_when_asked_for_everything() -> None:
    policy = _policy(reserved=CPUSet.of(0, 6))
    state = _fresh(policy)
    _, _, alloc = _allocate(policy, state, pod("p", [container("a", "10", "1Gi")]))
    assert alloc is not None and alloc.cpus == policy.all_cpus - CPUSet.of(0, 6)
    with pytest.raises(AllocationError, match=r"allocatable CPU\(s\)"):
        _allocate(policy, state, pod("q", [container("a", "1", "1Gi")]))


def test_no_result_takes_from_the_whole_machine_numa_packed() -> None:
    policy = _policy(reserved=CPUSet())
    state = _fresh(policy)
    _, decision, alloc = _allocate(policy, state, pod("p", [container("a", "6", "1Gi")]))
    assert decision.zones is None
    assert alloc is not None and alloc.cpus in (NUMA0, NUMA1), (
        "a request of one NUMA node's size takes a whole node"
    )


@pytest.mark.parametrize(
    ("pod_kwargs", "reason"),
    [
        ({"scheduler": "default-scheduler", "result": zones(node1=2)}, "untrusted-scheduler"),
        ({"result": '[{"name":"x","type":"Node","resources":{"capacity":{"cpu":"2"}}}]'}, "malformed"),
        ({"result": "not json"}, "malformed"),
        ({"result": zones(node7=2)}, "unknown-numa"),
        ({"result": zones(node1=3)}, "cpu-mismatch"),
        ({"result": zones(node0=1)}, "cpu-mismatch"),
    ],
)
def test_untrusted_or_bad_results_are_ignored(pod_kwargs: dict, reason: str) -> None:
    policy = _policy()
    state = _fresh(policy)
    _, decision, alloc = _allocate(policy, state, pod("p", [container("a", "2", "1Gi")], **pod_kwargs))
    assert decision.rejected is not None and decision.rejected[0] == reason
    assert decision.zones is None and decision.mode is CPUPolicy.EXCLUSIVE
    assert alloc is not None and len(alloc.cpus) == 2, "treated as absent: CPUs from the whole machine"


def test_a_user_cannot_claim_a_numa_node_by_annotation() -> None:
    policy = _policy(reserved=CPUSet())
    state = _fresh(policy)
    # A trusted pod uses part of NUMA 1; a pod from another scheduler asks for NUMA 0 by annotation:
    # the annotation is ignored and the packing puts it on NUMA 1, next to the used CPUs.
    _, _, a1 = _allocate(policy, state, pod("trusted", [container("a", "2", "1Gi")], result=zones(node1=2)))
    _, d2, a2 = _allocate(
        policy,
        state,
        pod("rogue", [container("a", "2", "1Gi")], result=zones(node0=2), scheduler="my-scheduler"),
    )
    assert a1 is not None and a1.cpus.issubset(NUMA1)
    assert d2.rejected and d2.rejected[0] == "untrusted-scheduler"
    assert a2 is not None and a2.cpus.issubset(NUMA1), "packed next to the used node, not where it asked"


@pytest.mark.parametrize(
    ("p", "why"),
    [
        (pod("p", [container("a", "2", "1Gi", request_cpu="1")]), "QoS class Burstable"),
        (pod("p", [container("a", "1500m", "1Gi")]), "no container with a whole-CPU request"),
        (pod("p", [container("a", "2", "1Gi")], policy="none"), "cpu-policy none"),
        (pod("p", [container("a", "2", "1Gi")], init=[container("i", "1", None)]), "QoS class Burstable"),
    ],
)
def test_ineligible_pods_stay_shared(p: dict, why: str) -> None:
    policy = _policy()
    state = _fresh(policy)
    info, decision, alloc = _allocate(policy, state, p)
    assert decision.mode is CPUPolicy.NONE and why in decision.note
    assert alloc is None and not state.get_assignments()
    assert policy.desired_cpuset(state, info, decision, "a", state.get_default_cpuset()) == policy.all_cpus


def test_unknown_policy_value_means_the_default() -> None:
    policy = _policy(default="immovable")
    assert (
        policy.decide(parse_pod(pod("p", [container("a", "2", "1Gi")], policy="bogus"))).mode
        is CPUPolicy.IMMOVABLE
    )
    assert policy.decide(parse_pod(pod("p", [container("a", "2", "1Gi")]))).mode is CPUPolicy.IMMOVABLE
    assert (
        policy.decide(parse_pod(pod("p", [container("a", "2", "1Gi")], policy="numa"))).mode is CPUPolicy.NUMA
    )


def test_immovable_cpus_stay_shared_but_are_not_allocatable() -> None:
    policy = _policy(reserved=CPUSet.of(0))
    state = _fresh(policy)
    imm, d_imm, a_imm = _allocate(
        policy, state, pod("imm", [container("a", "4", "1Gi")], policy="immovable", result=zones(node1=4))
    )
    assert a_imm is not None
    shared = policy.shared_pool(state, [imm.uid])
    assert a_imm.cpus.issubset(shared), "immovable CPUs stay in the shared pool"
    assert shared == policy.all_cpus
    assert a_imm.cpus.isdisjoint(policy.allocatable(state)), "nobody else can take them"
    # An exclusive pod wanting all of NUMA 1 cannot get it.
    with pytest.raises(AllocationError):
        _allocate(policy, state, pod("ex", [container("a", "3", "1Gi")], result=zones(node1=3)))
    # The immovable container itself runs on its own CPUs.
    assert policy.desired_cpuset(state, imm, d_imm, "a", shared) == a_imm.cpus
    policy.validate_state(state)


def test_numa_policy_runs_on_the_shared_cpus_of_its_nodes() -> None:
    policy = _policy(reserved=CPUSet.of(0, 6))
    state = _fresh(policy)
    _, _, ex = _allocate(policy, state, pod("ex", [container("a", "2", "1Gi")], result=zones(node0=2)))
    info, decision, alloc = _allocate(
        policy,
        state,
        pod(
            "n",
            [container("a", "2", "1Gi"), container("side", "500m", "64Mi")],
            policy="numa",
            result=zones(node0=2),
        ),
    )
    assert alloc is None and decision.mode is CPUPolicy.NUMA
    shared = state.get_default_cpuset()
    want = NUMA0 - CPUSet.of(0, 6) - ex.cpus  # shared, minus reserved, on node 0
    assert policy.desired_cpuset(state, info, decision, "a", shared) == want
    assert policy.desired_cpuset(state, info, decision, "side", shared) == shared, (
        "non-integer container: shared"
    )


def test_numa_pool_never_empty() -> None:
    policy = _policy(reserved=CPUSet.of(0, 6))
    # Exclusive pods took every unreserved CPU on node 0: the numa pod falls back to node 0's reserved CPUs.
    assert policy.numa_pool(CPUSet.parse("0-1,3,5-7,9,11"), [0]) == CPUSet.of(0, 6)
    assert policy.numa_pool(CPUSet.parse("1,3"), [0]) == CPUSet.parse("1,3")


def test_init_container_cpus_are_reused_by_app_containers() -> None:
    policy = _policy(topology=DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, reserved=CPUSet())
    state = MemoryState(policy.all_cpus)
    info, _, alloc = _allocate(
        policy,
        state,
        pod(
            "p",
            [container("app1", "2", "1Gi"), container("app2", "2", "1Gi")],
            init=[
                container("init", "4", "1Gi"),
                container("side", "1", "1Gi", restart_policy="Always"),
                container("init2", "3", "1Gi"),
            ],
        ),
    )
    assert info.exclusive_cpus == 5
    assert alloc is not None and len(alloc.cpus) == 5
    c = alloc.containers
    assert c["init"].issubset(alloc.cpus) and len(c["init"]) == 4
    assert c["init2"].isdisjoint(c["side"]), (
        "an init container does not use CPUs of a sidecar running beside it"
    )
    assert c["side"].isdisjoint(c["app1"] | c["app2"]) and c["app1"].isdisjoint(c["app2"])
    assert not c["init"].isdisjoint(c["app1"] | c["app2"]), "init CPUs are reused"
    assert state.get_default_cpuset() == policy.all_cpus - alloc.cpus
    policy.validate_state(state)


def test_allocate_is_idempotent_and_release_returns_everything() -> None:
    policy = _policy()
    state = _fresh(policy)
    info, decision, alloc = _allocate(policy, state, pod("p", [container("a", "2", "1Gi")]))
    assert policy.allocate(state, info, decision) is None
    release = policy.release(state, info.uid)
    assert release is not None and release.cpus == alloc.cpus
    release.apply(state)
    assert state.get_default_cpuset() == policy.all_cpus and not state.get_assignments()
    assert policy.release(state, info.uid) is None


@pytest.mark.parametrize(
    ("default", "assignments", "message"),
    [
        ("", {"u": {"a": "1"}}, "default cpuset is empty"),
        ("1-11", {"u": {"a": "0"}}, "not all reserved cpus"),
        ("0-11", {"u": {"a": "3"}}, "overlaps the default cpuset"),
        ("0,2,4-11", {"u": {"a": "1,3"}, "v": {"a": "3"}}, "overlaps other pods"),
        ("0,2-11", {}, "doesn't match with CPUs in state"),
        ("0-11,12", {}, "doesn't match with CPUs in state"),
        ("0,2-11", {"u": {"a": ""}}, "empty assignment"),
    ],
)
def test_validate_state_rules(default: str, assignments: dict, message: str) -> None:
    policy = _policy(reserved=CPUSet.of(0))
    state = MemoryState(
        CPUSet.parse(default),
        {u: {c: CPUSet.parse(s) for c, s in cs.items()} for u, cs in assignments.items()},
    )
    with pytest.raises(StateInvalidError, match=message):
        policy.validate_state(state)


def test_validate_state_accepts_init_reuse_within_a_pod_and_empty_state() -> None:
    policy = _policy(topology=SINGLE_SOCKET_HT, reserved=CPUSet.of(0))
    policy.validate_state(MemoryState())
    state = MemoryState(CPUSet.parse("0,3-7"), {"u": {"init": CPUSet.of(1, 2), "app": CPUSet.of(1)}})
    policy.validate_state(state)


def test_without_reserved_cpus_the_last_shared_cpu_is_kept() -> None:
    policy = _policy(topology=SINGLE_SOCKET_HT, reserved=CPUSet())
    state = _fresh(policy)
    with pytest.raises(AllocationError, match="would leave the shared pool"):
        _allocate(policy, state, pod("all", [container("a", "8", "1Gi")]))
    _, _, alloc = _allocate(policy, state, pod("most", [container("a", "7", "1Gi")]))
    assert alloc is not None and len(state.get_default_cpuset()) == 1
    policy.validate_state(state)
