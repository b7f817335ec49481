"""The extender's pod watch read on its event loop (``LoopReflector``), against the real kube-apiserver
v1.36.2 with the tests' fault-injecting proxy (``tests.cluster.faultproxy``) in between: no watch thread,
and the reflector's guarantees kept there:

- the cache follows pods as they are bound and deleted, from events read on the loop;
- a watch answered ``410 Gone`` relists, and the cache goes on following;
- a watch that passes no byte for the stall bound counts as stalled (``/readyz`` says so for the pods),
  is relisted, and the cache catches up once the API server answers again;
- a ``LoopReflector`` lists in pages (``limit`` + ``continue``) and lists again from the start when a
  ``continue`` token expired, as ``Reflector`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.extender.main import create_app
from app.model.policy import load_policy
from common.kube import Kube, load_api_client
from common.reflector_loop import LoopReflector
from tests.cluster.controlplane import ControlPlane, create_nodes, node_body, pod_body
from tests.cluster.faultproxy import FaultProxy, status_body
from tests.cluster.test_rebalancer_e2e import NS, POLICY, load
from tests.cluster.test_watch_stall import Recording, _configmaps
from tests.conftest import wait_for

pytestmark = pytest.mark.integration

POD_WATCH = r"^/api/v1/pods\?.*watch=true"
BOUND = 2.0


def _bound_pod(cluster: ControlPlane, name: str, node: str) -> str:
    """A pod created already bound to ``node`` (its ``spec.nodeName`` set); its UID."""
    body = pod_body(name, requests={"cpu": "100m", "memory": "64Mi"})
    body["spec"]["nodeName"] = node
    return cluster.core().create_namespaced_pod(NS, body).metadata.uid


@pytest.fixture
def served(cluster: ControlPlane, started: list[Any]) -> Iterator[tuple[Any, TestClient, FaultProxy]]:
    create_nodes(cluster.core(), [node_body("loop-x", annotations=load(0.3))])
    proxy = FaultProxy(cluster)
    started.append(proxy)
    kube = Kube(load_api_client(str(proxy.kubeconfig())), timeout=2.0)
    app = create_app(load_policy(POLICY), kube=kube, policy_poll_seconds=0, watch_stall_seconds=BOUND)
    try:
        with TestClient(app) as client:
            cache = app.state.services.cache
            assert cache.wait_synced(20)
            yield cache, client, proxy
    finally:
        kube.close()
        cluster.kubectl("delete", "pod", "-n", NS, "--all", "--grace-period=0", "--force", check=False)


def _pods(cache: Any) -> LoopReflector:
    (pods,) = [r for r in cache.reflectors if r.name == "pods"]
    return pods


def test_the_pod_watch_runs_on_the_event_loop_and_the_cache_follows_it(cluster, served) -> None:
    cache, _, _ = served
    pods = _pods(cache)
    assert isinstance(pods, LoopReflector) and pods.on_loop
    assert "reflector-pods" not in {t.name for t in threading.enumerate()}
    assert "reflector-nodes" in {t.name for t in threading.enumerate()}  # the node watch keeps its thread
    uid = _bound_pod(cluster, "loop-a", "loop-x")
    wait_for(lambda: cache.bound_node(uid) == "loop-x", timeout=20, what="the bound pod seen")
    events = pods.stats.events
    assert events >= 1
    cluster.core().delete_namespaced_pod("loop-a", NS, grace_period_seconds=0)
    wait_for(lambda: cache.bound_node(uid) is None, timeout=20, what="the deleted pod gone")
    assert pods.stats.events > events


def test_a_pod_watch_answered_410_relists_and_goes_on(cluster, served) -> None:
    cache, _, proxy = served
    pods = _pods(cache)
    lists = pods.stats.lists
    gone = status_body(410, "Expired", "too old resource version: 1 (2)")
    # the next watch the reflector opens gets the 410 (a quiet watch is given up at the 2 s stall bound)
    proxy.add(POD_WATCH, "answer", method="GET", status=410, body=gone, times=1)
    wait_for(lambda: pods.stats.expired >= 1, timeout=BOUND * 10, what="the 410 counted")
    wait_for(lambda: pods.stats.lists > lists + 1, timeout=BOUND * 10, what="the relist after the 410")
    uid = _bound_pod(cluster, "loop-b", "loop-x")
    wait_for(lambda: cache.bound_node(uid) == "loop-x", timeout=20, what="the next pod seen after the relist")


def test_a_stalled_pod_watch_is_told_relisted_and_caught_up(cluster, served) -> None:
    cache, client, proxy = served
    pods = _pods(cache)
    wait_for(lambda: client.get("/readyz").status_code == 200, timeout=20, what="readyz 200")
    rule = proxy.add(r"^/api/v1/pods\b", "hold", method="GET")  # the next watch and any relist
    held = time.monotonic()
    r = wait_for(lambda: (r := client.get("/readyz")).status_code == 503 and r, timeout=BOUND * 10 + 30,
                 what="readyz 503")  # fmt: skip
    assert "pods" in r.text, r.text
    wait_for(lambda: pods.stats.stalls >= 1, timeout=BOUND * 10, what="the stalled watch given up")
    uid = _bound_pod(cluster, "loop-d", "loop-x")  # bound while the pod watch is held
    time.sleep(0.5)
    assert cache.bound_node(uid) is None
    proxy.remove(rule)
    wait_for(lambda: cache.bound_node(uid) == "loop-x", timeout=20, what="the cache to catch up")
    wait_for(lambda: client.get("/readyz").status_code == 200, timeout=20, what="readyz 200 again")
    assert time.monotonic() - held > BOUND


@contextlib.contextmanager
def on_a_loop(reflector: LoopReflector) -> Iterator[None]:
    """``reflector`` started on an event loop of its own thread, as the extender starts it on its loop."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> None:
        reflector.start()

    asyncio.run_coroutine_threadsafe(start(), loop).result(5)
    try:
        assert reflector.on_loop
        yield
    finally:
        reflector.stop()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_a_loop_reflector_lists_in_pages_and_an_expired_continue_token_lists_again(
    cluster: ControlPlane, started: list[Any]
) -> None:
    path = _configmaps(cluster, 23)
    params = {"labelSelector": "paging=yes"}
    try:
        proxy = FaultProxy(cluster)
        started.append(proxy)
        kube = Kube(load_api_client(str(proxy.kubeconfig())), timeout=5.0)
        handler = Recording()
        paged = LoopReflector(kube, path, handler, params=params, name="paged", page_size=5)
        with on_a_loop(paged):
            assert paged.wait_synced(20)
            wait_for(lambda: paged.stats.watches >= 1, timeout=10, what="the watch opened on the loop")
        assert sorted(handler.names) == [f"paged-{i:02d}" for i in range(23)]
        assert paged.stats.pages == 5
        expired = status_body(410, "Expired", "The provided continue parameter is too old.")
        proxy.add(r"continue=", "answer", method="GET", status=410, body=expired, times=1)
        handler = Recording()
        again = LoopReflector(kube, path, handler, params=params, name="paged-again", page_size=5)
        with on_a_loop(again):
            assert again.wait_synced(20), (again.failing, proxy.errors[-3:])
        assert again.stats.expired == 1 and handler.started == 2 and handler.replaced == 1
        assert sorted(handler.names) == [f"paged-{i:02d}" for i in range(23)]
        kube.close()
    finally:
        cluster.kubectl("delete", "configmap", "-n", NS, "-l", "paging=yes", check=False)
