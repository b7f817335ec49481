"""``PodDemandMemo``: one pod read once on its way through filter, prioritize and the pod watch, while every
copy that differs in what the reading depends on is read again; and one record per request, which the NUMA
checks read too."""

from __future__ import annotations

import copy

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ballast.extender.extender import Extender
from ballast.extender.metrics import ExtenderMetrics
from ballast.extender.numa import community, crane
from ballast.extender.wire import ExtenderArgs
from ballast.model import podinfo
from ballast.model.bad_request import BadRequest
from ballast.model.ledger import Ledger
from ballast.model.nodestate import NodeState
from ballast.model.podinfo import PodDemandMemo
from ballast.model.policy import load_policy
from ballast.model.policy_store import PolicyStore
from ballast.testing.node_source import StaticSource
from ballast.testing.parts import POLICY_FILE


def _pod(cpu: object = "500m", priority: object = 10, uid: str = "u1") -> dict:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": uid, "resourceVersion": "7"},
        "spec": {
            "priority": priority,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
        },
    }


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    seen: list[object] = []
    real = podinfo.pod_info
    monkeypatch.setattr(podinfo, "pod_info", lambda pod: seen.append(pod) or real(pod))
    return seen


def test_three_copies_of_one_pod_are_read_once(reads: list[object]) -> None:
    memo = PodDemandMemo()
    body = orjson.dumps(_pod())
    infos = [memo(orjson.loads(body)) for _ in range(3)]  # filter, prioritize, the watch: separate copies
    bound = orjson.loads(body)
    bound["spec"]["nodeName"] = "n1"
    bound["metadata"]["resourceVersion"] = "8"
    infos.append(memo(bound))
    assert len(reads) == 1
    assert infos[0].cpu_request_milli == 500 and all(i is infos[0] for i in infos)


def test_a_copy_that_differs_is_read_again(reads: list[object]) -> None:
    memo = PodDemandMemo()
    assert memo(_pod("500m")).cpu_request_milli == 500
    assert memo(_pod("1")).cpu_request_milli == 1000  # resized, or a caller's edited copy
    assert memo(_pod("1", priority=True)).priority is None  # True == 1, but it is no priority
    assert memo(_pod("1", priority=1)).priority == 1
    assert len(reads) == 4
    with pytest.raises(BadRequest):
        memo(_pod("lots"))  # a bad copy after a good one is refused, not answered from the good one


def test_it_is_bounded_and_keeps_the_newest() -> None:
    memo = PodDemandMemo(cap=3)
    for i in range(10):
        memo(_pod(uid=f"u{i}"))
    assert len(memo) == 3
    assert memo(_pod(uid="u9")) is memo(copy.deepcopy(_pod(uid="u9")))


def test_unusual_shapes_take_the_plain_path() -> None:
    memo = PodDemandMemo()
    assert memo({"metadata": {"name": "p"}, "spec": {}}).uid == ""  # no UID: nothing to remember it by
    with pytest.raises(BadRequest):
        memo({"metadata": {"uid": "u"}, "spec": ["not an object"]})
    assert len(memo) == 0


@given(
    app=st.lists(st.tuples(*[st.integers(0, 5000)] * 4), max_size=4),
    init=st.lists(st.tuples(*[st.integers(0, 5000)] * 4), max_size=3),
)
def test_effective_values_are_the_larger_of_the_apps_sum_and_the_init_peak(app, init) -> None:
    """The kubelet's rule, per value: max(sum over app containers, max over init containers)."""

    def containers(values: list[tuple[int, int, int, int]]) -> list[dict]:
        return [
            {
                "name": f"c{i}",
                "resources": {
                    "requests": {"cpu": f"{cr}m", "memory": str(mr)},
                    "limits": {"cpu": f"{cl}m", "memory": str(ml)},
                },
            }
            for i, (cr, cl, mr, ml) in enumerate(values)
        ]

    info = podinfo.pod_info(
        {
            "metadata": {"uid": "u"},
            "spec": {"containers": containers(app), "initContainers": containers(init)},
        }
    )
    want = [max(sum(c[i] for c in app), max((c[i] for c in init), default=0)) for i in range(4)]
    got = [info.cpu_request_milli, info.cpu_limit_milli, info.memory_request_bytes, info.memory_limit_bytes]
    assert got == want


class PinningSource(StaticSource):
    """Nodes whose NRT says Ballast pins CPUs there (every NUMA check runs), but with no zones to fit."""

    def pins_cpus(self) -> bool:
        return True


def test_one_request_reads_its_pod_once_numa_checks_included(monkeypatch: pytest.MonkeyPatch) -> None:
    """filter and prioritize read the pod into one record (``PodDemandMemo.record``); the NUMA checks read
    the kubelet's view of it from that record, once per request, never from the object again."""
    detail: list[object] = []
    real = podinfo.parse_pod
    monkeypatch.setattr(podinfo, "parse_pod", lambda pod: detail.append(pod) or real(pod))
    for module in (crane, community):
        monkeypatch.setattr(module, "parse_pod", lambda pod: pytest.fail("the pod read a second way"))
    policy = load_policy(POLICY_FILE)
    loads = {n: NodeState(n) for n in ("a", "b")}
    ext = Extender(PolicyStore(policy), ExtenderMetrics(), PinningSource(loads), Ledger(policy))
    pod = _pod(cpu="2", uid="numa")
    pod["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "2", "memory": "64Mi"}  # Guaranteed
    ext.filter(ExtenderArgs(pod, None, ["a", "b"]))
    assert len(detail) == 1
    ext.prioritize(ExtenderArgs(copy.deepcopy(pod), None, ["a", "b"]))
    assert len(detail) == 2  # one more request, one more reading (the NUMA need and the scores share it)
    assert ext.numa.seen("numa").cpus == 2  # what filter and prioritize learnt, for bind
