"""A Binding whose reply is lost may have landed: the bind's placement record is taken back only while the
pod watch has not seen the pod there, whichever of the two comes first.

The API server is a stand-in here, so the order of its write, the watch's event and the lost reply can be
chosen; the same fault against the real kube-apiserver, with kube-scheduler retrying, is
``tests/cluster/test_extender_e2e.py::test_restarting_the_api_server_mid_drain_binds_every_pod_once``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ballast.contract.annotations import LoadSample
from ballast.extender.bind import Binder
from ballast.extender.load_bind import LoadPreBind
from ballast.extender.wire import BindingArgs
from ballast.kube.client import ApiError
from ballast.model.ledger import Ledger
from ballast.model.nodestate import NodeState
from ballast.model.podinfo import pod_info
from ballast.model.policy import load_policy
from ballast.model.policy_store import PolicyStore
from ballast.testing.parts import POLICY_FILE

POLICY = load_policy(POLICY_FILE)
NOW = time.time()
NODE = "n1"
UID = "uid-web"
POD = {
    "metadata": {"name": "web", "namespace": "shop", "uid": UID},
    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
}


class PodWatch:
    """What the extender's pod watch does with a bound pod: note where it is, then record it."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.nodes: dict[str, str] = {}

    def sees_bound(self, node: str) -> None:
        self.nodes[UID] = node
        self.ledger.bound(pod_info(POD), UID, node, NOW)


class Api:
    """An API server whose Binding is written (and the pod watch told, when ``watch_first``) before its
    reply is lost: no answer, as after a reset."""

    timeout = 2.0

    def __init__(self, watch: PodWatch, watch_first: bool, lost: bool = True) -> None:
        self.watch = watch
        self.watch_first = watch_first
        self.lost = lost
        self.bound: str | None = None

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        yield

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.bound is not None:
            raise ApiError(409, "Conflict", f"pod web is already assigned to node {self.bound!r}")
        self.bound = body["target"]["name"]
        if self.watch_first:
            self.watch.sees_bound(self.bound)
        if self.lost:
            raise ApiError(0, "Unavailable", "POST binding: ConnectionResetError: connection reset by peer")
        return {}

    async def get(self, path: str) -> dict[str, Any]:
        return {**POD, "spec": {**POD["spec"], "nodeName": self.bound or ""}}


def binder(api: Api, ledger: Ledger, watch: PodWatch) -> Binder:
    load = NodeState(NODE, {"cpu_usage_avg_5m": LoadSample(0.1, NOW)}, allocatable_cpu_milli=8000)
    lookup: Callable[[str], NodeState | None] = {NODE: load}.get
    store = PolicyStore(POLICY)
    check = LoadPreBind(api, ledger, store, lookup, lambda: NOW, bound_node=watch.nodes.get)  # type: ignore[arg-type]
    return Binder(api, ledger, lambda: NOW, pre_bind=[check], bound_node=watch.nodes.get)  # type: ignore[arg-type]


ARGS = BindingArgs("web", "shop", UID, NODE)


@pytest.mark.parametrize("watch_first", [True, False], ids=["watch-before-the-lost-reply", "watch-after-it"])
def test_a_binding_that_landed_keeps_its_record_whatever_came_first(watch_first: bool) -> None:
    ledger = Ledger(POLICY, lambda: NOW)
    watch = PodWatch(ledger)
    api = Api(watch, watch_first)
    bind = binder(api, ledger, watch)
    answer = asyncio.run(bind.bind(ARGS))
    if watch_first:
        assert answer == ""  # the watch already told where the pod is: the bind landed
    else:
        assert "connection reset" in answer  # not known yet: kube-scheduler will try again
        watch.sees_bound(NODE)
    placed = ledger.known(UID)
    assert placed is not None and placed.node == NODE and not placed.tentative
    # kube-scheduler's retry of a bind it saw fail: success, and the pod stays counted once, on its node
    assert asyncio.run(bind.bind(ARGS)) == ""
    assert [e.uid for e in ledger.on_node(NODE)] == [UID]


def test_a_binding_that_failed_takes_its_record_back() -> None:
    """The other side of the rule: no Binding, no pod seen bound, so the node gets its room back."""

    class Refuses(Api):
        async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
            raise ApiError(500, "InternalError", "etcdserver: request timed out")

    ledger = Ledger(POLICY, lambda: NOW)
    watch = PodWatch(ledger)
    answer = asyncio.run(binder(Refuses(watch, watch_first=False), ledger, watch).bind(ARGS))
    assert "etcdserver: request timed out" in answer
    assert ledger.known(UID) is None and ledger.on_node(NODE) == []
