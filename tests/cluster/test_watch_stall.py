"""Watches that stall and lists that page, against the real kube-apiserver v1.36.2 with the tests' own
fault-injecting proxy (``ballast.testing.faultproxy``) between the program and the API server.

A stalled watch is a connection that stays open while nothing arrives (a stuck proxy or load balancer, a
half-dead TCP connection): no error ever comes, so without a bound the cache stays frozen until the next
resync. The proxy's ``hold`` rule makes one: it forwards the request and passes no byte of the reply.

- a rebalancer whose node watch is stalled relists within ``--watch-stall-timeout`` and does not evict from
  a node whose load dropped while the watch was stalled (with the cycle count at 6 and a 1 s interval, a
  frozen cache evicts at about 6 s; the bound here is 2 s);
- the extender's ``/readyz`` says so while the node watch is stalled and its relist cannot get through, and
  its cache catches up once the API server answers again;
- kube-apiserver sends a bookmark on a quiet watch well within the default bound (two minutes), so a healthy
  watch is never taken for a stalled one;
- a Reflector lists in pages (``limit`` + ``continue``) and its handler sees every object; a ``continue``
  token that expired (the proxy answers its request 410 ``Expired``, as kube-apiserver does once etcd has
  compacted past the list) lists again from the start, and the handler never keeps a partial list.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ballast.extender.main import create_app
from ballast.kube.client import WATCH_STALL_SECONDS, Kube, Reflector, load_api_client
from ballast.model.policy import load_policy
from ballast.testing.controlplane import ControlPlane, create_nodes, node_body, wait_until
from ballast.testing.faultproxy import FaultProxy, status_body
from ballast.testing.parts import wait_for
from tests.cluster.test_rebalance_safety import EVICTION, performed, workload
from tests.cluster.test_rebalancer_e2e import NS, POLICY, Rebalancer, load, set_load, write_policy

pytestmark = pytest.mark.integration

NODE_WATCH = r"^/api/v1/nodes\?.*watch=true"
BOUND = 2.0
"""The stall bound the tests run with (``--watch-stall-timeout``); shipped: two minutes."""


def hot(r: Rebalancer) -> int | None:
    """Hot nodes in the rebalancer's last planned cycle."""
    cycle = r.view().get("lastCycle")
    return cycle["nodes"].get("hot", 0) if cycle else None


def cycles(r: Rebalancer) -> float:
    return sum(r.metric("ballast_rebalancer_cycles_total", result=x) for x in ("ok", "aborted"))


def test_a_rebalancer_never_evicts_on_load_its_stalled_watch_missed(
    cluster: ControlPlane, started: list[Any], tmp_path: Path
) -> None:
    core = cluster.core()
    create_nodes(
        core, [node_body("node-a", annotations=load(0.95)), node_body("node-b", annotations=load(0.2))]
    )
    workload(core, "stall", 2, "node-a")
    policy = write_policy(tmp_path / "policy.yaml", consecutiveAbnormal=6, consecutiveNormal=1)
    proxy = FaultProxy(cluster)
    started.append(proxy)
    proxy.add(NODE_WATCH, "hold", method="GET")  # every node watch: open, and nothing ever arrives
    r = Rebalancer(cluster, policy, "--kubeconfig", str(proxy.kubeconfig()), "--no-leader-elect",
                   "--watch-stall-timeout", f"{BOUND:g}s", "--resync", "10m")  # fmt: skip
    started.append(r)
    wait_until(lambda: (r.watched("node-a") or {}).get("state") == "hot", r.server, "node-a hot")
    changed = time.monotonic()
    set_load(core, "node-a", 0.30)  # straight to the API server: the rebalancer's node watch is held
    wait_until(lambda: hot(r) == 0, r.server, "the rebalancer to read node-a's new load")
    caught_up = time.monotonic() - changed
    # a frozen cache would evict at the 6th hot cycle; let twice that many cycles pass
    seen = cycles(r)
    wait_until(lambda: cycles(r) >= seen + 12, r.server, "12 more cycles")
    assert performed(proxy) == [] and proxy.requests("POST", EVICTION) == []
    assert len(proxy.requests("GET", NODE_WATCH)) >= 2  # the held watch was given up and opened again
    assert caught_up < BOUND + 4, (
        f"node-a's new load reached the rebalancer {caught_up:.1f}s after the change"
    )


def test_the_extender_readyz_tells_a_stalled_watch_and_its_cache_catches_up(
    cluster: ControlPlane, started: list[Any]
) -> None:
    core = cluster.core()
    create_nodes(core, [node_body("stall-x", annotations=load(0.5))])
    proxy = FaultProxy(cluster)
    started.append(proxy)
    kube = Kube(load_api_client(str(proxy.kubeconfig())), timeout=2.0)
    app = create_app(load_policy(POLICY), kube=kube, policy_poll_seconds=0, watch_stall_seconds=BOUND)
    cache = app.state.services.cache

    def value() -> float | None:
        load_ = cache.node("stall-x")
        sample = load_.samples.get("cpu_usage_avg_5m") if load_ is not None else None
        return sample.value if sample is not None else None

    with TestClient(app) as client:
        assert cache.wait_synced(20) and value() == 0.5
        wait_for(lambda: client.get("/readyz").status_code == 200, timeout=20, what="readyz 200")
        rule = proxy.add(r"^/api/v1/nodes\b", "hold", method="GET")  # the open watch and any relist
        held = time.monotonic()
        set_load(core, "stall-x", 0.9)
        r = wait_for(lambda: (r := client.get("/readyz")).status_code == 503 and r, timeout=BOUND * 5,
                     what="readyz 503")  # fmt: skip
        assert time.monotonic() - held < BOUND + 4
        assert "stalled" in r.text and "nodes" in r.text, r.text
        assert value() == 0.5  # nothing came through the held watch
        nodes = cache.reflectors[0]
        wait_for(lambda: nodes.stats.stalls >= 1, timeout=BOUND * 5, what="the stalled watch given up")
        assert client.get("/readyz").status_code == 503  # its relist is held too: still not ready
        proxy.remove(rule)
        wait_for(lambda: value() == 0.9, timeout=20, what="the cache to catch up")
        wait_for(lambda: client.get("/readyz").status_code == 200, timeout=20, what="readyz 200 again")
    kube.close()


def test_kube_apiserver_sends_bookmarks_well_within_the_default_stall_bound(cluster: ControlPlane) -> None:
    """A quiet collection (a namespace's configmaps that nobody writes): the first bookmark arrives within
    the default bound, so a healthy quiet watch is never relisted as stalled."""
    kube = Kube(load_api_client(str(cluster.kubeconfig)), timeout=10.0)
    cluster.kubectl("create", "namespace", "quiet", check=False)
    path = "/api/v1/namespaces/quiet/configmaps"
    _, rv = kube.list_pages(path)
    start = time.monotonic()
    params = {"resourceVersion": rv, "allowWatchBookmarks": "true"}
    for event in kube.watch(path, params, 290, silence=WATCH_STALL_SECONDS):
        if event.get("type") == "BOOKMARK":
            break
    waited = time.monotonic() - start
    print(f"first bookmark on a quiet watch after {waited:.1f}s")
    assert waited < WATCH_STALL_SECONDS / 1.5, f"the first bookmark came after {waited:.0f}s"
    kube.close()


class Recording:
    """A handler that builds each list aside and keeps it only when the list ends (the rule for handlers)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.replaced = 0
        self.started = 0

    def replace(self, objects: Iterable[dict[str, Any]], resource_version: str) -> None:
        self.started += 1
        names = [o["metadata"]["name"] for o in objects]
        self.names, self.replaced = names, self.replaced + 1

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        pass


def _configmaps(cluster: ControlPlane, n: int) -> str:
    core = cluster.core()
    for i in range(n):
        core.create_namespaced_config_map(
            NS, {"metadata": {"name": f"paged-{i:02d}", "labels": {"paging": "yes"}}, "data": {"i": str(i)}}
        )
    return f"/api/v1/namespaces/{NS}/configmaps"


def test_a_reflector_lists_in_pages_and_an_expired_continue_token_lists_again(
    cluster: ControlPlane, started: list[Any]
) -> None:
    path = _configmaps(cluster, 23)
    params = {"labelSelector": "paging=yes"}
    try:
        proxy = FaultProxy(cluster)
        started.append(proxy)
        kube = Kube(load_api_client(str(proxy.kubeconfig())), timeout=5.0)
        handler = Recording()
        paged = Reflector(kube, path, handler, params=params, name="paged", page_size=5)
        paged.start()
        assert paged.wait_synced(20)
        paged.stop()
        assert sorted(handler.names) == [f"paged-{i:02d}" for i in range(23)]
        lists = proxy.requests("GET", r"^/api/v1/namespaces/default/configmaps\?(?!.*watch=true)")
        assert len(lists) == 5 and all("limit=5" in s.target for s in lists)
        assert sum("continue=" in s.target for s in lists) == 4 and paged.stats.pages == 5
        # the third page's token has expired: the reflector lists again from the start
        expired = status_body(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. You can "
            "start a new list without the continue parameter.",
        )
        proxy.add(r"continue=", "answer", method="GET", status=410, body=expired, times=1)
        handler = Recording()
        kube.close()
        kube = Kube(load_api_client(str(proxy.kubeconfig())), timeout=5.0)  # nothing left of the first
        again = Reflector(kube, path, handler, params=params, name="paged-again", page_size=5)
        again.start()
        assert again.wait_synced(20), (again.failing, proxy.errors[-3:])
        again.stop()
        assert again.stats.expired == 1 and handler.started == 2 and handler.replaced == 1
        assert sorted(handler.names) == [f"paged-{i:02d}" for i in range(23)]
        kube.close()
    finally:
        cluster.kubectl("delete", "configmap", "-n", NS, "-l", "paging=yes", check=False)
