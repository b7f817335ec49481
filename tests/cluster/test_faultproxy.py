"""The tests' fault-injecting proxy (``ballast.testing.faultproxy``) against the real kube-apiserver: each
fault does what the tests that use it rely on."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from ballast.kube.client import ApiError, Kube, load_api_client
from ballast.testing.controlplane import ControlPlane, wait_until
from ballast.testing.faultproxy import FaultProxy, status_body

pytestmark = pytest.mark.integration

CM = "/api/v1/namespaces/default/configmaps"


@pytest.fixture
def proxy(cluster: ControlPlane) -> Iterator[FaultProxy]:
    with FaultProxy(cluster) as p:
        yield p


def kube_via(proxy: FaultProxy, timeout: float = 5.0) -> Kube:
    return Kube(load_api_client(str(proxy.kubeconfig())), timeout=timeout)


def configmap(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}}


def test_requests_pass_unchanged_without_a_rule(proxy: FaultProxy, cluster: ControlPlane) -> None:
    kube = kube_via(proxy)
    kube.create(CM, configmap("fp-pass"))
    assert kube.get(f"{CM}/fp-pass")["data"] == {"a": "b"}
    assert [s.status for s in proxy.requests("POST", "/configmaps$")] == [201]
    kube.request("DELETE", f"{CM}/fp-pass")


def test_answer_never_reaches_the_api_server(proxy: FaultProxy, cluster: ControlPlane) -> None:
    kube = kube_via(proxy)
    rule = proxy.add("/configmaps$", "answer", method="POST", status=429, headers={"Retry-After": "3"},
                     body=b"Too many requests, please try again later.\n", times=1)  # fmt: skip
    with pytest.raises(ApiError) as err:
        kube.create(CM, configmap("fp-answer"))
    assert err.value.code == 429 and err.value.retry_after == "3"
    assert rule.hits == 1 and proxy.requests("POST", "/configmaps$")[0].status is None
    with pytest.raises(ApiError) as missing:
        kube.get(f"{CM}/fp-answer")
    assert missing.value.code == 404
    kube.create(CM, configmap("fp-answer"))  # times=1: the next one passes
    kube.request("DELETE", f"{CM}/fp-answer")


@pytest.mark.parametrize("status", [500, 0])
def test_lose_does_it_and_hides_the_reply(proxy: FaultProxy, cluster: ControlPlane, status: int) -> None:
    kube = kube_via(proxy)
    name = f"fp-lose-{status}"
    proxy.add("/configmaps$", "lose", method="POST", status=status,
              body=status_body(500, "InternalError", "lost"))  # fmt: skip
    with pytest.raises(ApiError) as err:
        kube.create(CM, configmap(name))
    assert err.value.code == status  # 0: no HTTP status at all (connection reset)
    proxy.clear()
    assert kube.get(f"{CM}/{name}")["data"] == {"a": "b"}  # the API server did it
    assert proxy.requests("POST", "/configmaps$")[0].status == 201
    kube.request("DELETE", f"{CM}/{name}")


def test_hold_stalls_a_watch_that_is_already_open(proxy: FaultProxy, cluster: ControlPlane) -> None:
    kube = kube_via(proxy, timeout=30)
    direct = Kube(load_api_client(str(cluster.kubeconfig)))
    rv = direct.get(CM)["metadata"]["resourceVersion"]
    names: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        for event in kube.watch(CM, {"resourceVersion": rv}, 60, stop=stop):
            names.append(event["object"]["metadata"]["name"])

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    direct.create(CM, configmap("fp-hold-1"))
    wait_until(lambda: "fp-hold-1" in names, None, "the first event through the open watch", 30)
    rule = proxy.add("/configmaps.*watch=true", "hold")
    direct.create(CM, configmap("fp-hold-2"))
    # the API server sends the event: a watch straight to it gets it, the held one does not
    for event in direct.watch(CM, {"resourceVersion": rv}, 30):
        if event["object"]["metadata"]["name"] == "fp-hold-2":
            break
    assert names == ["fp-hold-1"]
    proxy.remove(rule)
    wait_until(lambda: "fp-hold-2" in names, None, "the held event after the hold is removed", 30)
    stop.set()
    for name in ("fp-hold-1", "fp-hold-2"):
        direct.request("DELETE", f"{CM}/{name}")
