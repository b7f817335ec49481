"""Random pod lifecycles against the CPU manager, invariants checked after every step (hypothesis).

Steps: pods arrive (any mix of QoS, whole/fractional CPUs, init containers and sidecars, the four cpu
policies and unknown ones, valid, wrong, malformed or untrusted topology results, with or without
container ids), leave, finish, restart containers, relist, restart the agent from its checkpoint,
restart it from a corrupted checkpoint, and hit a runtime that fails for a whole pass.

After each step (one reconcile pass) the state and what the runtime was told must satisfy:

- no CPU is in the assignments of two pods; sidecars and app containers of one pod are disjoint;
- reserved CPUs are never assigned;
- the default set plus the assignments are exactly the machine's CPUs, and do not overlap;
- a pod with a trusted topology result has exactly the result's CPU count on each NUMA node named;
- every running container was set to its desired cpuset, and an exclusive pod's CPUs are in no other
  container's cpuset.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)

from ballast.agent.cpumanager.manager import CPUManager
from ballast.agent.cpumanager.runtime import MemoryRuntime, RuntimeCallError
from ballast.agent.cpuset import CPUSet
from ballast.agent.topology.model import CPUTopology
from ballast.contract.exclusive import CPUPolicy
from ballast.contract.pod import ContainerKind, parse_pod
from ballast.testing.cri_fake import NODE, SCHEDULER, container, container_id, pod
from tests.agent.kubelet_topologies import DUAL_SOCKET_HT, DUAL_SOCKET_NO_HT, SINGLE_SOCKET_HT

# (name, topology, reserved CPUs)
TOPOLOGIES = [
    ("1 socket, 4 CPUs, no SMT", CPUTopology.from_cpus((c, c, 0, 0) for c in range(4)), CPUSet.of(0)),
    ("1 socket HT, 8 CPUs", SINGLE_SOCKET_HT, CPUSet()),
    ("2 sockets HT, 12 CPUs", DUAL_SOCKET_HT, CPUSet.of(0, 6)),
    ("2 sockets, 8 CPUs", DUAL_SOCKET_NO_HT, CPUSet.of(0, 4)),
    (
        "4 NUMA nodes, sparse ids",
        CPUTopology.from_cpus((c, c, c // 8, c // 4) for c in (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15)),
        CPUSet.of(1),
    ),
]

CPU_VALUES = ["1", "2", "3", "500m", "1500m"]
POLICIES = [None, "exclusive", "immovable", "numa", "none", "bogus"]


@st.composite
def pod_specs(draw):
    app = [
        container(
            f"app{i}",
            draw(st.sampled_from(CPU_VALUES)),
            draw(st.sampled_from(["64Mi", "64Mi", "64Mi", None])),
        )
        for i in range(draw(st.integers(1, 3)))
    ]
    init = []
    for i in range(draw(st.integers(0, 2))):
        sidecar = draw(st.booleans())
        init.append(
            container(
                f"init{i}",
                draw(st.sampled_from(CPU_VALUES)),
                "64Mi",
                restart_policy="Always" if sidecar else None,
            )
        )
    return {
        "app": app,
        "init": init,
        "policy": draw(st.sampled_from(POLICIES)),
        "result": draw(st.sampled_from(["none", "valid", "valid", "valid", "random", "malformed"])),
        "trusted": draw(st.booleans()) or draw(st.booleans()),
        "statuses": draw(st.sampled_from(["running", "running", "no-ids", "waiting", "none"])),
        "seed": draw(st.integers(0, 2**16)),
    }


class CPUManagerMachine(RuleBasedStateMachine):
    pods = Bundle("pods")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="ballast-sm-"))
        self.runtime = MemoryRuntime()
        self.objects: dict[str, dict] = {}
        self.restarts: dict[str, dict[str, int]] = {}
        self.counter = 0

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- set-up -------------------------------------------------------------------------------------

    @initialize(choice=st.sampled_from(TOPOLOGIES))
    def start(self, choice) -> None:
        self.name, self.topology, self.reserved = choice
        self.manager = self._new_manager()
        self.manager.on_pods([])
        self._pass()

    def _new_manager(self) -> CPUManager:
        return CPUManager(
            self.topology,
            self.reserved,
            self.tmp / "cpu_manager_state",
            self.runtime,
            allowed_schedulers=[SCHEDULER],
            default_policy="exclusive",
            node_name=NODE,
        )

    def _pass(self) -> None:
        self.manager.reconcile_once()

    def _zones(self, spec: dict, need: int) -> list | str | None:
        import random

        rng = random.Random(spec["seed"])
        numas = list(self.topology.numa_ids)
        if spec["result"] == "none":
            return None
        if spec["result"] == "malformed":
            return rng.choice(['[{"name":"x"}]', "not json", '[{"name":"node0","type":"Node"}]', "[]"])
        if spec["result"] == "random":
            chosen = rng.sample([*numas, 97], k=min(2, len(numas) + 1))
            return [
                {
                    "name": f"node{n}",
                    "type": "Node",
                    "resources": {"capacity": {"cpu": str(rng.randint(1, 3))}},
                }
                for n in chosen
            ]
        if need == 0:
            return None
        # One or two NUMA nodes, any of them (not only the low ids the packing prefers anyway).
        chosen = rng.sample(numas, k=min(len(numas), rng.choice([1, 1, 2])))
        split: dict[int, int] = {}
        for _ in range(need):
            n = rng.choice(chosen)
            split[n] = split.get(n, 0) + 1
        return [
            {"name": f"node{n}", "type": "Node", "resources": {"capacity": {"cpu": str(k)}}}
            for n, k in split.items()
        ]

    def _object(self, uid: str, spec: dict, created: str) -> dict:
        probe = parse_pod(pod("probe", spec["app"], init=spec["init"]))
        obj = pod(
            f"pod-{uid[:6]}",
            spec["app"],
            init=spec["init"],
            uid=uid,
            policy=spec["policy"],
            result=self._zones(spec, probe.exclusive_cpus),
            scheduler=SCHEDULER if spec["trusted"] else "default-scheduler",
            statuses=spec["statuses"],
            restarts=self.restarts.get(uid),
            created=created,
        )
        for c in [*spec["app"], *spec["init"]]:
            n = self.restarts.get(uid, {}).get(c["name"], 0)
            self.runtime.containers[(uid, c["name"])] = container_id(uid, c["name"], n)
        return obj

    # --- rules --------------------------------------------------------------------------------------

    @rule(target=pods, spec=pod_specs())
    def add_pod(self, spec) -> str:
        self.counter += 1
        uid = f"{self.counter:08d}-0000-4000-8000-000000000000"
        obj = self._object(uid, spec, f"2026-01-01T00:{self.counter // 60:02d}:{self.counter % 60:02d}Z")
        obj["_spec"] = spec
        self.objects[uid] = obj
        self.manager.on_pod_event("ADDED", {k: v for k, v in obj.items() if k != "_spec"})
        self._pass()
        return uid

    @rule(uid=consumes(pods))
    def delete_pod(self, uid) -> None:
        obj = self.objects.pop(uid)
        self.manager.on_pod_event("DELETED", {k: v for k, v in obj.items() if k != "_spec"})
        self._pass()

    @rule(uid=consumes(pods))
    def finish_pod(self, uid) -> None:
        obj = self.objects.pop(uid)
        done = {k: v for k, v in obj.items() if k != "_spec"}
        done["status"] = {"phase": "Succeeded"}
        self.manager.on_pod_event("MODIFIED", done)
        self._pass()

    @rule(uid=pods, data=st.data())
    def restart_container(self, uid, data) -> None:
        obj = self.objects[uid]
        spec = obj["_spec"]
        if spec["statuses"] == "none":
            # A restart is reported in the status (restartCount), which a pod without statuses lacks.
            spec = {**spec, "statuses": "no-ids"}
        name = data.draw(st.sampled_from([c["name"] for c in spec["app"]]))
        self.restarts.setdefault(uid, {})[name] = self.restarts.get(uid, {}).get(name, 0) + 1
        fresh = self._object(uid, spec, obj["metadata"]["creationTimestamp"])
        # The annotations are not re-drawn: keep the original ones (an edit would not be a resize anyway).
        fresh["metadata"]["annotations"] = obj["metadata"]["annotations"]
        fresh["_spec"] = spec
        self.objects[uid] = fresh
        self.manager.on_pod_event("MODIFIED", {k: v for k, v in fresh.items() if k != "_spec"})
        self._pass()

    @rule()
    def relist(self) -> None:
        self.manager.on_pods([{k: v for k, v in o.items() if k != "_spec"} for o in self.objects.values()])
        self._pass()

    @rule()
    def restart_agent(self) -> None:
        before = (self.manager.state.get_default_cpuset(), _plain(self.manager.state.get_assignments()))
        self.manager = self._new_manager()
        assert self.manager.state.recovery is None
        assert (
            self.manager.state.get_default_cpuset(),
            _plain(self.manager.state.get_assignments()),
        ) == before
        self.relist()
        assert _plain(self.manager.state.get_assignments()) == before[1], (
            "nothing reallocated after a restart"
        )

    @rule(
        garbage=st.sampled_from(
            [b"", b"{", b"\x00" * 10, b'{"policyName":"static","defaultCpuSet":"0","checksum":1}']
        )
    )
    def restart_agent_from_corrupt_checkpoint(self, garbage) -> None:
        path = self.tmp / "cpu_manager_state"
        path.write_bytes(garbage)
        self.manager = self._new_manager()
        assert self.manager.state.recovery is not None
        assert self.manager.state.recovery.moved_to is not None
        assert self.manager.state.recovery.moved_to.read_bytes() == garbage
        self.relist()

    @precondition(lambda self: bool(self.objects))
    @rule()
    def runtime_down_for_a_pass(self) -> None:
        self.runtime.fail = lambda ref, cpus: RuntimeCallError("unavailable", "runtime down")
        self._pass()
        self.runtime.fail = None
        self._pass()

    # --- invariants ---------------------------------------------------------------------------------

    @invariant()
    def state_is_consistent(self) -> None:
        if not hasattr(self, "manager"):
            return
        m = self.manager
        state = m.state
        m.policy.validate_state(state)  # disjoint pods, reserved in default, union == all
        default = state.get_default_cpuset()
        assignments = state.get_assignments()
        assigned = CPUSet().union(*(c for ctrs in assignments.values() for c in ctrs.values()))
        assert assigned.isdisjoint(self.reserved), "reserved CPUs assigned"
        assert (default | assigned) == self.topology.all_cpus and default.isdisjoint(assigned)
        seen = CPUSet()
        for ctrs in assignments.values():
            pod_cpus = CPUSet().union(*ctrs.values())
            assert pod_cpus.isdisjoint(seen), "a CPU in two pods' assignments"
            seen |= pod_cpus

    @invariant()
    def assignments_follow_the_pods(self) -> None:
        if not hasattr(self, "manager"):
            return
        m = self.manager
        assignments = m.state.get_assignments()
        for uid, ctrs in assignments.items():
            assert uid in self.objects, "state kept for a pod that is gone"
            info = parse_pod({k: v for k, v in self.objects[uid].items() if k != "_spec"})
            decision = m.decision(uid)
            assert decision is not None and decision.pins
            pod_cpus = CPUSet().union(*ctrs.values())
            assert len(pod_cpus) == info.exclusive_cpus
            long_running = CPUSet()
            for c in info.containers:
                if c.exclusive_cpus:
                    assert len(ctrs[c.name]) == c.exclusive_cpus
                    if c.kind is not ContainerKind.INIT:
                        assert long_running.isdisjoint(ctrs[c.name]), "app containers/sidecars overlap"
                        long_running |= ctrs[c.name]
                else:
                    assert c.name not in ctrs
            if decision.zones:
                for numa, k in decision.zones:
                    on_node = pod_cpus & self.topology.cpus_in_numa(numa)
                    assert len(on_node) == k, f"NUMA node {numa}: {on_node} for a result of {k}"

    @invariant()
    def runtime_matches(self) -> None:
        if not hasattr(self, "manager"):
            return
        m = self.manager
        state = m.state
        assignments = state.get_assignments()
        immovable = [u for u in assignments if m.decision(u) and m.decision(u).mode is CPUPolicy.IMMOVABLE]
        shared = m.policy.shared_pool(state, immovable)
        exclusive_cpus = {
            u: CPUSet().union(*ctrs.values())
            for u, ctrs in assignments.items()
            if m.decision(u).mode is CPUPolicy.EXCLUSIVE
        }
        for uid, obj in self.objects.items():
            info = parse_pod({k: v for k, v in obj.items() if k != "_spec"})
            for c in info.containers:
                status = info.statuses.get(c.name)
                running = status.running if status is not None else info.phase == "Running"
                if not running:
                    continue
                cid = container_id(uid, c.name, self.restarts.get(uid, {}).get(c.name, 0))
                applied = self.runtime.cpusets.get(cid)
                want = m.policy.desired_cpuset(state, info, m.decision(uid), c.name, shared)
                assert applied == want, f"{uid}/{c.name}: runtime has {applied}, want {want}"
                assert applied
                for other, cpus in exclusive_cpus.items():
                    if other != uid:
                        assert applied.isdisjoint(cpus), f"{uid}/{c.name} runs on {other}'s exclusive CPUs"


def _plain(assignments) -> dict:
    return {u: dict(c) for u, c in assignments.items()}


CPUManagerMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCPUManagerStateMachine = CPUManagerMachine.TestCase
