"""The fake API server, exercised through the official kubernetes client as Ballast's components use it.

Each test pins one behaviour of the real API server that Ballast relies on (paths, JSON shapes, watch
semantics, error codes); if the fake drifts, these fail before component tests silently test fiction.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from ballast.testing.fakekube import (
    FakeKube,
    FakeKubeError,
    make_event,
    make_lease,
    make_node,
    make_nrt,
    make_pod,
)

NRT = ("topology.crane.io", "v1alpha1", "noderesourcetopologies")
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture
def v1(kube_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_client)


@pytest.fixture
def custom(kube_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_client)


@pytest.fixture
def leases(kube_client: client.ApiClient) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(kube_client)


def raw(
    api: client.ApiClient,
    fake: FakeKube,
    method: str,
    path: str,
    body: Any = None,
    content_type: str | None = None,
) -> tuple[int, Any]:
    """One request through `ApiClient.call_api` (which does not raise on errors): (status, parsed JSON)."""
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    response = api.call_api(method, fake.url + path, header_params=headers, body=body)
    response.read()
    return response.status, json.loads(response.data)


def status_body(exc: ApiException) -> dict:
    return json.loads(exc.body)


def later(action: Callable[[], None], fake: FakeKube, watches: int = 1) -> threading.Thread:
    """Run `action` in a thread once `watches` watches are open (so it races nothing)."""

    def run() -> None:
        assert fake.wait_for_watches(watches, timeout=5)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def drain(fake: FakeKube, func: Callable[..., Any], *args: Any, **kwargs: Any) -> list[dict]:
    """Every event a new watch has due right now, without waiting for a timeout.

    The server sends a requested BOOKMARK only once a watcher's queue is empty, so the events before the
    first BOOKMARK are exactly the replay (or initial state) plus whatever happened meanwhile.
    """
    done = threading.Event()

    def poke() -> None:
        while not done.wait(0.02):
            fake.send_bookmarks()

    threading.Thread(target=poke, daemon=True).start()
    seen = []
    w = watch.Watch()
    try:
        for event in w.stream(func, *args, allow_watch_bookmarks=True, timeout_seconds=5, **kwargs):
            if event["type"] == "BOOKMARK":
                w.stop()
                break
            seen.append(event)
    finally:
        done.set()
    return seen


def events(stream: Iterator[dict], limit: int = 100) -> list[tuple[str, str]]:
    out = []
    for event in stream:
        raw_obj = event["raw_object"]
        out.append((event["type"], raw_obj.get("metadata", {}).get("name", "")))
        if len(out) >= limit:
            break
    return out


# ---------------------------------------------------------------- connection, shapes, errors


def test_kubeconfig_client_reaches_fake_and_version(
    fake_kube: FakeKube, kube_client: client.ApiClient
) -> None:
    assert kube_client.configuration.host == fake_kube.url
    version = client.VersionApi(kube_client).get_code()
    assert version.major == "1"
    fake_kube.add(make_node("n1"))
    assert [n.metadata.name for n in client.CoreV1Api(kube_client).list_node().items] == ["n1"]


def test_server_assigns_metadata_and_resource_versions(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    node = v1.create_node(make_node("n1"))
    pod = v1.create_namespaced_pod("default", make_pod("p1", cpu="500m", memory="1Gi"))
    assert node.metadata.uid and pod.metadata.uid and node.metadata.uid != pod.metadata.uid
    raw_pod = fake_kube.get("pods", "p1", namespace="default")
    assert raw_pod is not None
    assert RFC3339.match(raw_pod["metadata"]["creationTimestamp"])
    assert isinstance(raw_pod["metadata"]["resourceVersion"], str)
    assert int(pod.metadata.resource_version) == int(node.metadata.resource_version) + 1
    assert pod.metadata.generation == 1 and node.metadata.generation is None
    # Server-side pod defaulting the scheduler path reads.
    assert pod.status.phase == "Pending" and pod.status.qos_class == "Burstable"
    assert pod.spec.scheduler_name == "default-scheduler"
    guaranteed = v1.create_namespaced_pod("default", make_pod("g", cpu="2", memory="1Gi", limits=True))
    assert guaranteed.status.qos_class == "Guaranteed"
    assert guaranteed.spec.containers[0].resources.requests == {"cpu": "2", "memory": "1Gi"}


def test_create_rules(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    made = v1.create_namespaced_pod(
        "default", {"metadata": {"generateName": "web-"}, "spec": {"containers": []}}
    )
    assert re.fullmatch(r"web-[a-z0-9]{5}", made.metadata.name)
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_pod("default", make_pod("p", namespace="other"))
    assert exc.value.status == 400
    with pytest.raises(ApiException) as exc:
        v1.create_node({"metadata": {}})
    assert exc.value.status == 422
    assert status_body(exc.value)["message"] == (
        'Node "" is invalid: metadata.name: Required value: name or generateName is required'
    )
    pod = make_pod("s")
    pod["status"] = {"phase": "Running"}
    assert (
        v1.create_namespaced_pod("default", pod).status.phase == "Pending"
    )  # status is not settable on create


def test_already_exists_and_not_found_status_bodies(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_node("n1"))
    with pytest.raises(ApiException) as exc:
        v1.create_node(make_node("n1"))
    assert exc.value.status == 409
    assert status_body(exc.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'nodes "n1" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "n1", "kind": "nodes"},
        "code": 409,
    }
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_pod("x", "default")
    body = status_body(exc.value)
    assert (exc.value.status, body["reason"], body["message"]) == (404, "NotFound", 'pods "x" not found')
    assert body["details"] == {"name": "x", "kind": "pods"}
    with pytest.raises(ApiException) as exc:
        client.CoordinationV1Api(v1.api_client).read_namespaced_lease("l", "kube-system")
    assert status_body(exc.value)["message"] == 'leases.coordination.k8s.io "l" not found'
    assert status_body(exc.value)["details"]["group"] == "coordination.k8s.io"


def test_list_response_shapes(fake_kube: FakeKube, kube_client: client.ApiClient) -> None:
    fake_kube.add(make_node("n1"))
    fake_kube.add(make_nrt("n1"))
    status, nodes = raw(kube_client, fake_kube, "GET", "/api/v1/nodes")
    assert status == 200
    assert (nodes["kind"], nodes["apiVersion"]) == ("NodeList", "v1")
    assert nodes["metadata"]["resourceVersion"] == fake_kube.resource_version
    assert "kind" not in nodes["items"][0] and "apiVersion" not in nodes["items"][0]
    _, nrts = raw(kube_client, fake_kube, "GET", "/apis/topology.crane.io/v1alpha1/noderesourcetopologies")
    assert nrts["kind"] == "NodeResourceTopologyList"
    assert nrts["items"][0]["kind"] == "NodeResourceTopology"  # unstructured items keep their type
    status, gone = raw(kube_client, fake_kube, "GET", "/api/v1/widgets")
    assert (status, gone["reason"]) == (404, "NotFound")


def test_unknown_path_and_method(fake_kube: FakeKube, kube_client: client.ApiClient) -> None:
    status, body = raw(kube_client, fake_kube, "GET", "/api/v1/namespaces/default/pods/p/binding")
    assert (status, body["reason"]) == (405, "MethodNotAllowed")
    status, body = raw(kube_client, fake_kube, "GET", "/api/v1/namespaces/default/nodes")
    assert (status, body["reason"]) == (404, "NotFound")


# ---------------------------------------------------------------- watch


def test_watch_from_resource_version_replays_in_order(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_node("n1"))
    start = fake_kube.resource_version
    fake_kube.patch("nodes", "n1", {"metadata": {"labels": {"zone": "a"}}})
    fake_kube.add(make_node("n2"))
    fake_kube.delete("nodes", "n1")
    seen = drain(fake_kube, v1.list_node, resource_version=start)
    assert [(e["type"], e["object"].metadata.name) for e in seen] == [
        ("MODIFIED", "n1"),
        ("ADDED", "n2"),
        ("DELETED", "n1"),
    ]
    rvs = [int(e["object"].metadata.resource_version) for e in seen]
    assert rvs == sorted(rvs) and rvs[0] > int(start)
    deleted = seen[-1]["raw_object"]
    assert deleted["metadata"]["labels"]["zone"] == "a"  # last state ...
    assert int(deleted["metadata"]["resourceVersion"]) == int(fake_kube.resource_version)  # ... new RV
    assert deleted["kind"] == "Node" and deleted["apiVersion"] == "v1"


def test_watch_without_resource_version_starts_with_current_objects(
    fake_kube: FakeKube, v1: client.CoreV1Api
) -> None:
    fake_kube.add(make_node("b"))
    fake_kube.add(make_node("a"))
    later(lambda: fake_kube.add(make_node("c")), fake_kube)
    got = events(watch.Watch().stream(v1.list_node, timeout_seconds=2), limit=3)
    assert got == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]


def test_field_selector_watch_sees_pod_arrive_and_leave(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    """The agent's `spec.nodeName=<node>` watch: binding is ADDED for it, leaving the selection is DELETED."""
    fake_kube.add(make_node("n1"))
    fake_kube.add(make_pod("p", labels={"app": "x"}))
    start = fake_kube.resource_version
    v1.create_namespaced_pod_binding(
        "p",
        "default",
        {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}},
        _preload_content=False,
    )
    fake_kube.patch("pods", "p", {"metadata": {"labels": {"app": "y"}}}, namespace="default")
    fake_kube.patch("pods", "p", {"metadata": {"labels": {"app": "x", "v": "2"}}}, namespace="default")
    seen = drain(
        fake_kube,
        v1.list_pod_for_all_namespaces,
        field_selector="spec.nodeName=n1",
        label_selector="app=x",
        resource_version=start,
    )
    assert [e["type"] for e in seen] == ["ADDED", "DELETED", "ADDED"]
    assert seen[1]["raw_object"]["metadata"]["labels"]["app"] == "x"  # previous content, new RV
    assert int(seen[1]["raw_object"]["metadata"]["resourceVersion"]) > int(
        seen[0]["object"].metadata.resource_version
    )


def test_bookmarks_on_request_and_periodic(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_node("n1"))
    later(lambda: fake_kube.send_bookmarks(), fake_kube)
    w = watch.Watch()
    got = []
    for event in w.stream(v1.list_node, allow_watch_bookmarks=True, timeout_seconds=2):
        got.append(event)
        if event["type"] == "BOOKMARK":
            break
    assert [e["type"] for e in got] == ["ADDED", "BOOKMARK"]
    assert got[1]["raw_object"] == {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": fake_kube.resource_version},
    }
    assert w.resource_version == fake_kube.resource_version
    # Periodic bookmarks, only for watches that asked for them.
    with FakeKube(bookmark_interval=0.2) as fast:
        api = fast.api_client()
        fast_v1 = client.CoreV1Api(api)
        plain: list[str] = []
        thread = threading.Thread(
            target=lambda: plain.extend(
                e["type"] for e in watch.Watch().stream(fast_v1.list_node, timeout_seconds=1)
            )
        )
        thread.start()
        try:
            stamps = []
            w = watch.Watch()
            for event in w.stream(fast_v1.list_node, allow_watch_bookmarks=True, timeout_seconds=5):
                assert event["type"] == "BOOKMARK"
                stamps.append(time.monotonic())
                if len(stamps) == 3:
                    w.stop()
            thread.join(timeout=5)
        finally:
            api.close()
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert all(0.15 <= gap <= 0.6 for gap in gaps), gaps
    assert plain == []


def test_send_initial_events_ends_with_annotated_bookmark(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_node("n1"))
    w = watch.Watch()
    got = []
    for event in w.stream(
        v1.list_node,
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        allow_watch_bookmarks=True,
        timeout_seconds=5,
    ):
        got.append(event)
        if event["type"] == "BOOKMARK":
            w.stop()
    assert [e["type"] for e in got] == ["ADDED", "BOOKMARK"]
    assert got[1]["raw_object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    with pytest.raises(ApiException) as exc:
        list(watch.Watch().stream(v1.list_node, send_initial_events=True, timeout_seconds=1))
    assert exc.value.status == 422


def test_watch_after_compaction_gets_410_expired(
    fake_kube: FakeKube, v1: client.CoreV1Api, kube_client: Any
) -> None:
    fake_kube.add(make_node("n1"))
    old = fake_kube.resource_version
    fake_kube.add(make_node("n2"))
    fake_kube.compact()
    # With timeout_seconds the client does not retry: the ERROR event becomes ApiException(410).
    with pytest.raises(ApiException) as exc:
        list(watch.Watch().stream(v1.list_node, resource_version=old, timeout_seconds=1))
    assert exc.value.status == 410
    assert exc.value.reason == f"Expired: too old resource version: {old} ({fake_kube.resource_version})"
    # Without it, the client retries once from the same RV, then raises.
    fake_kube.clear_requests()
    with pytest.raises(ApiException) as exc:
        list(watch.Watch().stream(v1.list_node, resource_version=old))
    assert exc.value.status == 410
    assert len(fake_kube.find_requests("GET", "/api/v1/nodes", watch=True)) == 2
    # On the wire it is an ERROR event carrying a Status, inside a 200 stream.
    response = v1.list_node(watch=True, resource_version=old, _preload_content=False)
    assert response.status == 200
    line = json.loads(response.data.decode().splitlines()[0])
    assert line["type"] == "ERROR"
    assert line["object"] == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {old} ({fake_kube.resource_version})",
        "reason": "Expired",
        "code": 410,
    }
    # A watch from the current RV is fine.
    assert drain(fake_kube, v1.list_node, resource_version=fake_kube.resource_version) == []


def test_compaction_does_not_break_open_watches(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_node("n1"))

    def compact_then_add() -> None:
        fake_kube.compact()
        fake_kube.add(make_node("n2"))

    later(compact_then_add, fake_kube)
    got = events(watch.Watch().stream(v1.list_node, timeout_seconds=5), limit=2)
    assert got == [("ADDED", "n1"), ("ADDED", "n2")]


def test_history_limit_expires_old_versions(v1: client.CoreV1Api, fake_kube: FakeKube) -> None:
    fake_kube.set_history_limit(3)
    fake_kube.add(make_node("n0"))
    old = fake_kube.resource_version
    for i in range(4):
        fake_kube.patch("nodes", "n0", {"metadata": {"labels": {"i": str(i)}}})
    with pytest.raises(ApiException) as exc:
        list(watch.Watch().stream(v1.list_node, resource_version=old, timeout_seconds=1))
    assert exc.value.status == 410
    recent = str(int(fake_kube.resource_version) - 2)
    assert len(drain(fake_kube, v1.list_node, resource_version=recent)) == 2


def test_list_resource_version_match_semantics(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_node("n1"))
    old = fake_kube.resource_version
    fake_kube.add(make_node("n2"))
    exact = v1.list_node(resource_version=old, resource_version_match="Exact")
    assert [n.metadata.name for n in exact.items] == ["n1"] and exact.metadata.resource_version == old
    fake_kube.compact()
    with pytest.raises(ApiException) as exc:
        v1.list_node(resource_version=old, resource_version_match="Exact")
    assert (exc.value.status, status_body(exc.value)["reason"]) == (410, "Expired")
    assert status_body(exc.value)["message"] == "The resourceVersion for the provided list is too old."
    newer = v1.list_node(resource_version=old, resource_version_match="NotOlderThan")
    assert len(newer.items) == 2 and newer.metadata.resource_version == fake_kube.resource_version
    with pytest.raises(ApiException) as exc:
        v1.list_node(resource_version_match="Exact")
    assert exc.value.status == 422
    fake_kube.store.too_large_rv_wait = 0.1  # the real server waits up to 3 s for its cache to catch up
    future = str(int(fake_kube.resource_version) + 5)
    with pytest.raises(ApiException) as exc:
        v1.list_node(resource_version=future, resource_version_match="NotOlderThan")
    assert exc.value.status == 504
    assert status_body(exc.value)["message"].startswith(f"Timeout: Too large resource version: {future}")


def test_drop_watches_abruptly_breaks_the_stream(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_node("n1"))
    later(lambda: fake_kube.drop_watches(), fake_kube)
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.ProtocolError):
        list(watch.Watch().stream(v1.list_node, timeout_seconds=10))
    assert time.monotonic() - started < 5
    assert fake_kube.wait_for_watches(0, exactly=True)  # the server released it too


def test_graceful_watch_end_makes_client_rewatch_from_last_rv(
    fake_kube: FakeKube, v1: client.CoreV1Api
) -> None:
    fake_kube.add(make_node("n1"))
    first_rv = fake_kube.resource_version

    def end_then_add() -> None:
        fake_kube.drop_watches(graceful=True)
        assert eventually(lambda: len(fake_kube.find_requests("GET", watch=True)) == 2)
        fake_kube.add(make_node("n2"))

    later(end_then_add, fake_kube)
    w = watch.Watch()
    names = []
    for event in w.stream(v1.list_node):
        names.append(event["object"].metadata.name)
        if len(names) == 2:
            w.stop()
    assert names == ["n1", "n2"]
    rewatch = fake_kube.find_requests("GET", "/api/v1/nodes", watch=True)[1]
    assert rewatch.query["resourceVersion"] == first_rv


def test_timeout_seconds_ends_stream_cleanly(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    started = time.monotonic()
    assert list(watch.Watch().stream(v1.list_node, timeout_seconds=1)) == []
    assert 0.9 <= time.monotonic() - started < 3


# ---------------------------------------------------------------- binding


def test_binding_sets_node_condition_annotations(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_node("n1"))
    pod = v1.create_namespaced_pod("default", make_pod("p", cpu="1"))
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(
            name="p", uid=pod.metadata.uid, annotations={"topology.crane.io/topology-result": "[]"}
        ),
        target=client.V1ObjectReference(kind="Node", name="n1"),
    )
    before = fake_kube.resource_version
    # The Python client cannot decode the Status the server answers into V1Binding: read it raw.
    response = v1.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
    assert response.status == 201
    assert json.loads(response.data) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    bound = v1.read_namespaced_pod("p", "default")
    assert bound.spec.node_name == "n1"
    assert bound.metadata.annotations["topology.crane.io/topology-result"] == "[]"
    scheduled = [c for c in bound.status.conditions if c.type == "PodScheduled"]
    assert len(scheduled) == 1 and scheduled[0].status == "True" and scheduled[0].last_transition_time
    assert int(bound.metadata.resource_version) == int(before) + 1
    modified = drain(fake_kube, v1.list_namespaced_pod, "default", resource_version=before)
    assert [(e["type"], e["object"].spec.node_name) for e in modified] == [("MODIFIED", "n1")]


def test_binding_conflicts_and_not_found(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_pod("p", node_name="n1"))
    fake_kube.add(make_pod("q"))

    def bind(name: str, node: str = "n2", **meta: Any) -> ApiException:
        body = {"metadata": {"name": name, **meta}, "target": {"kind": "Node", "name": node}}
        with pytest.raises(ApiException) as exc:
            v1.create_namespaced_pod_binding(name, "default", body, _preload_content=False)
        return exc.value

    assigned = bind("p")
    assert assigned.status == 409 and status_body(assigned)["reason"] == "Conflict"
    assert status_body(assigned)["message"] == (
        'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"'
    )
    assert status_body(assigned)["details"] == {"name": "p", "kind": "pods/binding"}
    missing = bind("nope")
    assert missing.status == 404 and status_body(missing)["message"] == 'pods "nope" not found'
    wrong_uid = bind("q", uid="00000000-0000-0000-0000-000000000000")
    assert wrong_uid.status == 409
    assert status_body(wrong_uid)["message"].startswith(
        'Operation cannot be fulfilled on pods "q": StorageError'
    )
    assert (
        "Precondition failed: UID in precondition: 00000000-0000-0000-0000-000000000000"
        in status_body(wrong_uid)["message"]
    )
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_pod_binding(
            "q", "default", {"metadata": {"name": "other"}, "target": {"name": "n2"}}, _preload_content=False
        )
    assert exc.value.status == 400
    assert fake_kube.get("pods", "q", namespace="default")["spec"].get("nodeName") is None
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_pod_binding(
            "q", "default", {"metadata": {"name": "q"}, "target": {}}, _preload_content=False
        )
    assert exc.value.status == 422
    assert status_body(exc.value)["message"] == 'Binding "q" is invalid: target.name: Required value'
    gated = make_pod("gated")
    gated["spec"]["schedulingGates"] = [{"name": "ballast/wait"}]
    fake_kube.add(gated)
    assert bind("gated").status == 409
    # The legacy namespaced bindings endpoint does the same.
    v1.create_namespaced_binding(
        "default", {"metadata": {"name": "q"}, "target": {"name": "n2"}}, _preload_content=False
    )
    assert fake_kube.get("pods", "q", namespace="default")["spec"]["nodeName"] == "n2"


# ---------------------------------------------------------------- patches and updates


def test_node_patches_by_content_type(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_node("n1", labels={"a": "1"}, annotations={"keep": "x"}))
    v1.patch_node("n1", {"metadata": {"annotations": {"cpu_usage_avg_5m": "0.35210,2026-11-22T07:00:00Z"}}})
    assert fake_kube.requests[-1].content_type == "application/strategic-merge-patch+json"
    v1.patch_node("n1", [{"op": "add", "path": "/metadata/labels/topology.crane.io~1zone", "value": "z1"}])
    assert fake_kube.requests[-1].content_type == "application/json-patch+json"
    v1.patch_node(
        "n1", {"metadata": {"annotations": {"keep": None}}}, _content_type="application/merge-patch+json"
    )
    node = fake_kube.get("nodes", "n1")
    assert node["metadata"]["annotations"] == {"cpu_usage_avg_5m": "0.35210,2026-11-22T07:00:00Z"}
    assert (
        node["metadata"]["labels"]["topology.crane.io/zone"] == "z1"
        and node["metadata"]["labels"]["a"] == "1"
    )
    # Node status is a subresource: changes through the main endpoint are dropped, /status applies them.
    v1.patch_node("n1", {"status": {"allocatable": {"cpu": "1"}}})
    assert fake_kube.get("nodes", "n1")["status"]["allocatable"]["cpu"] == "4"
    v1.patch_node_status("n1", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    conditions = fake_kube.get("nodes", "n1")["status"]["conditions"]
    assert conditions == [{"type": "Ready", "status": "False", "reason": "KubeletReady"}]  # merged by type


def test_json_patch_failures(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_node("n1", labels={"a": "1"}))
    before = fake_kube.resource_version
    with pytest.raises(ApiException) as exc:
        v1.patch_node(
            "n1",
            [
                {"op": "test", "path": "/metadata/labels/a", "value": "2"},
                {"op": "remove", "path": "/metadata/labels/a"},
            ],
        )
    body = status_body(exc.value)
    assert (exc.value.status, body["reason"]) == (422, "Invalid")
    assert body["message"] == "the server rejected our request due to an error in our request"
    with pytest.raises(ApiException) as exc:
        v1.patch_node("n1", [{"op": "remove", "path": "/metadata/labels/missing"}])
    assert exc.value.status == 422
    assert fake_kube.resource_version == before  # nothing applied
    v1.patch_node(
        "n1",
        [
            {"op": "test", "path": "/metadata/labels/a", "value": "1"},
            {"op": "remove", "path": "/metadata/labels/a"},
        ],
    )
    assert "a" not in fake_kube.get("nodes", "n1")["metadata"]["labels"]


def test_pod_strategic_merge_and_status_subresource(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    pod = make_pod("p", cpu="1")
    pod["spec"]["containers"].append({"name": "side", "image": "busybox:1.36"})
    fake_kube.add(pod)
    patched = v1.patch_namespaced_pod(
        "p",
        "default",
        {
            "spec": {"containers": [{"name": "side", "env": [{"name": "A", "value": "1"}]}]},
            "status": {"phase": "Running"},
        },
    )
    names = [c.name for c in patched.spec.containers]
    assert names == ["main", "side"]  # merged by name, not replaced
    assert (
        patched.spec.containers[1].env[0].name == "A" and patched.spec.containers[1].image == "busybox:1.36"
    )
    assert patched.status.phase == "Pending"  # status ignored on the main endpoint
    assert patched.metadata.generation == 2  # spec change bumps generation
    running = v1.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running"}})
    assert running.status.phase == "Running" and running.metadata.generation == 2


def test_nrt_custom_object_patch_types(fake_kube: FakeKube, custom: client.CustomObjectsApi) -> None:
    custom.create_cluster_custom_object(*NRT, make_nrt("n1"))
    merged = custom.patch_cluster_custom_object(*NRT, "n1", {"attributes": {"kubelet": "ok"}})
    assert fake_kube.requests[-1].content_type == "application/merge-patch+json"
    assert merged["attributes"] == {"kubelet": "ok"} and merged["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as exc:
        custom.patch_cluster_custom_object(
            *NRT, "n1", {"attributes": {"x": "y"}}, _content_type="application/strategic-merge-patch+json"
        )
    assert exc.value.status == 415
    assert status_body(exc.value)["reason"] == "UnsupportedMediaType"
    assert status_body(exc.value)["message"].startswith(
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json"
    )
    patched = custom.patch_cluster_custom_object(
        *NRT,
        "n1",
        [{"op": "replace", "path": "/zones/0/resources/allocatable/cpu", "value": "3"}],
        _content_type="application/json-patch+json",
    )
    assert patched["zones"][0]["resources"]["allocatable"]["cpu"] == "3"
    only_meta = custom.patch_cluster_custom_object(*NRT, "n1", {"metadata": {"labels": {"a": "b"}}})
    assert only_meta["metadata"]["generation"] == 3  # metadata changes do not bump generation


def test_noop_patch_keeps_resource_version_and_emits_nothing(
    fake_kube: FakeKube, v1: client.CoreV1Api
) -> None:
    fake_kube.add(make_node("n1", annotations={"a": "1"}))
    before = fake_kube.resource_version
    same = v1.patch_node("n1", {"metadata": {"annotations": {"a": "1"}}})
    assert same.metadata.resource_version == before == fake_kube.resource_version
    assert drain(fake_kube, v1.list_node, resource_version=before) == []


def test_put_resource_version_rules(
    fake_kube: FakeKube, v1: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    fake_kube.add(make_node("n1"))
    node = v1.read_node("n1")
    stale = node.metadata.resource_version
    node.metadata.labels["x"] = "1"
    v1.replace_node("n1", node)
    node.metadata.labels["x"] = "2"
    with pytest.raises(ApiException) as exc:
        v1.replace_node("n1", node)
    assert exc.value.status == 409
    assert status_body(exc.value)["message"] == (
        'Operation cannot be fulfilled on nodes "n1": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert node.metadata.resource_version == stale
    node.metadata.resource_version = None  # unconditional update is allowed for nodes
    assert v1.replace_node("n1", node).metadata.labels["x"] == "2"
    nrt = custom.create_cluster_custom_object(*NRT, make_nrt("n1"))
    del nrt["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as exc:
        custom.replace_cluster_custom_object(*NRT, "n1", nrt)
    assert exc.value.status == 422
    assert status_body(exc.value)["message"] == (
        'NodeResourceTopology.topology.crane.io "n1" is invalid: metadata.resourceVersion: '
        "Invalid value: 0x0: must be specified for an update"
    )
    with pytest.raises(ApiException) as exc:
        v1.replace_node("missing", make_node("missing"))
    assert exc.value.status == 404


def test_lease_optimistic_concurrency(fake_kube: FakeKube, leases: client.CoordinationV1Api) -> None:
    created = leases.create_namespaced_lease(
        "kube-system", make_lease("ballast-annotator", namespace="kube-system", holder="a")
    )
    # Two replicas read the same version; only the first write wins.
    mine = leases.read_namespaced_lease("ballast-annotator", "kube-system")
    theirs = leases.read_namespaced_lease("ballast-annotator", "kube-system")
    mine.spec.holder_identity = "a"
    mine.spec.lease_transitions = 1
    won = leases.replace_namespaced_lease("ballast-annotator", "kube-system", mine)
    assert int(won.metadata.resource_version) > int(created.metadata.resource_version)
    theirs.spec.holder_identity = "b"
    with pytest.raises(ApiException) as exc:
        leases.replace_namespaced_lease("ballast-annotator", "kube-system", theirs)
    assert exc.value.status == 409 and status_body(exc.value)["reason"] == "Conflict"
    assert 'leases.coordination.k8s.io "ballast-annotator"' in status_body(exc.value)["message"]
    assert (
        fake_kube.get("leases", "ballast-annotator", namespace="kube-system")["spec"]["holderIdentity"] == "a"
    )
    # PUT may create a lease (AllowCreateOnUpdate), patch works, delete answers a Status.
    put = leases.replace_namespaced_lease(
        "other", "kube-system", make_lease("other", namespace="kube-system")
    )
    assert put.metadata.uid
    assert fake_kube.requests[-1].status == 201
    renewed = leases.patch_namespaced_lease("other", "kube-system", {"spec": {"holderIdentity": "c"}})
    assert renewed.spec.holder_identity == "c"
    deleted = leases.delete_namespaced_lease("other", "kube-system")
    assert deleted["status"] == "Success" and deleted["details"]["name"] == "other"


# ---------------------------------------------------------------- selectors and paging


def test_label_selectors(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_node("a", labels={"zone": "z1", "gpu": "true"}))
    fake_kube.add(make_node("b", labels={"zone": "z2"}))
    fake_kube.add(make_node("c"))

    def names(selector: str) -> list[str]:
        return [n.metadata.name for n in v1.list_node(label_selector=selector).items]

    assert names("zone=z1") == ["a"]
    assert names("zone==z2") == ["b"]
    assert names("zone!=z1") == ["b", "c"]  # includes nodes without the label
    assert names("zone in (z1,z2)") == ["a", "b"]
    assert names("zone notin (z1)") == ["b", "c"]
    assert names("gpu") == ["a"]
    assert names("!gpu") == ["b", "c"]
    assert names("zone,!gpu") == ["b"]
    with pytest.raises(ApiException) as exc:
        v1.list_node(label_selector="zone in (")
    assert exc.value.status == 400


def test_field_selectors(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_pod("bound", node_name="n1", phase="Running"))
    fake_kube.add(make_pod("pending"))
    fake_kube.add(make_pod("other", namespace="kube-system", node_name="n2", phase="Running"))

    def names(selector: str, namespace: str | None = None) -> list[str]:
        if namespace:
            return [p.metadata.name for p in v1.list_namespaced_pod(namespace, field_selector=selector).items]
        return [p.metadata.name for p in v1.list_pod_for_all_namespaces(field_selector=selector).items]

    assert names("spec.nodeName=") == ["pending"]
    assert names("spec.nodeName!=") == ["bound", "other"]
    assert names("spec.nodeName=n1") == ["bound"]
    assert names("status.phase=Running,metadata.namespace=kube-system") == ["other"]
    assert names("status.phase!=Running", namespace="default") == ["pending"]
    assert names("metadata.name=bound") == ["bound"]
    with pytest.raises(ApiException) as exc:
        v1.list_pod_for_all_namespaces(field_selector="spec.bogus=1")
    assert exc.value.status == 400
    assert status_body(exc.value)["message"] == "field label not supported: spec.bogus"


def test_events_endpoints_and_selectors(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    v1.create_namespaced_event("default", make_event("p.1", reason="Scheduled"))
    v1.create_namespaced_event(
        "kube-system",
        make_event("q.1", namespace="kube-system", reason="FailedScheduling", event_type="Warning"),
    )
    everywhere = v1.list_event_for_all_namespaces(field_selector="involvedObject.kind=Pod")
    assert [e.metadata.name for e in everywhere.items] == ["p.1", "q.1"]
    warnings = v1.list_event_for_all_namespaces(field_selector="type=Warning,reason=FailedScheduling")
    assert [e.metadata.name for e in warnings.items] == ["q.1"]
    assert [e.metadata.name for e in v1.list_namespaced_event("default").items] == ["p.1"]


def test_pagination_is_a_consistent_snapshot(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    for name in ["p1", "p2", "p3", "p4", "p5"]:
        fake_kube.add(make_pod(name))
    first = v1.list_namespaced_pod("default", limit=2)
    assert [p.metadata.name for p in first.items] == ["p1", "p2"]
    assert first.metadata.remaining_item_count == 3 and first.metadata._continue
    fake_kube.add(make_pod("p0"))  # created after the first page: not part of this list
    fake_kube.delete("pods", "p5", namespace="default")  # deleted after: still listed
    second = v1.list_namespaced_pod("default", limit=2, _continue=first.metadata._continue)
    third = v1.list_namespaced_pod("default", limit=2, _continue=second.metadata._continue)
    assert [p.metadata.name for p in second.items + third.items] == ["p3", "p4", "p5"]
    assert (
        third.metadata._continue is None
        and third.metadata.resource_version == first.metadata.resource_version
    )
    again = v1.list_namespaced_pod("default", limit=2)
    fake_kube.add(make_pod("p9"))
    fake_kube.compact()  # the snapshot revision is now older than the compacted one
    with pytest.raises(ApiException) as exc:
        v1.list_namespaced_pod("default", limit=2, _continue=again.metadata._continue)
    assert exc.value.status == 410
    assert status_body(exc.value)["message"].startswith("The provided continue parameter is too old")


# ---------------------------------------------------------------- deletion


def test_pod_deletion_is_graceful_once_bound(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_pod("unbound"))
    fake_kube.add(make_pod("bound", node_name="n1", phase="Running"))
    gone = v1.delete_namespaced_pod("unbound", "default")
    assert gone.metadata.name == "unbound"  # pods answer with the object
    assert fake_kube.get("pods", "unbound", namespace="default") is None
    before = fake_kube.resource_version
    terminating = v1.delete_namespaced_pod("bound", "default")
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 30
    fake_kube.delete("pods", "bound", namespace="default")  # the kubelet's final delete
    seen = [e["type"] for e in drain(fake_kube, v1.list_pod_for_all_namespaces, resource_version=before)]
    assert seen == ["MODIFIED", "DELETED"]
    now = v1.create_namespaced_pod("default", make_pod("quick", node_name="n1"))
    v1.delete_namespaced_pod("quick", "default", grace_period_seconds=0)
    assert fake_kube.get("pods", "quick", namespace="default") is None and now.metadata.uid
    for name in ("a", "b", "c"):
        fake_kube.add(make_pod(name, labels={"batch": "1" if name != "c" else "2"}))
    # The server answers the list of deleted pods (the client's model says Status, so read it raw).
    removed = json.loads(
        v1.delete_collection_namespaced_pod("default", label_selector="batch=1", _preload_content=False).data
    )
    assert removed["kind"] == "PodList" and [p["metadata"]["name"] for p in removed["items"]] == ["a", "b"]
    assert [p["metadata"]["name"] for p in fake_kube.list("pods")] == ["c"]


def test_finalizers_delay_deletion(
    fake_kube: FakeKube, custom: client.CustomObjectsApi, v1: client.CoreV1Api
) -> None:
    nrt = make_nrt("n1")
    nrt["metadata"]["finalizers"] = ["ballast/cleanup"]
    custom.create_cluster_custom_object(*NRT, nrt)
    marked = custom.delete_cluster_custom_object(*NRT, "n1")
    assert marked["metadata"]["deletionTimestamp"] and fake_kube.get(NRT[2], "n1") is not None
    before = fake_kube.resource_version
    custom.patch_cluster_custom_object(*NRT, "n1", {"metadata": {"finalizers": None}})
    assert fake_kube.get(NRT[2], "n1") is None
    seen = drain(fake_kube, custom.list_cluster_custom_object, *NRT, resource_version=before)
    assert [e["type"] for e in seen] == ["DELETED"]
    fake_kube.add(make_node("n1"))
    status = v1.delete_node("n1")  # the client types this `object`: a Status for nodes, not the Node
    assert status["kind"] == "Status" and status["status"] == "Success"
    assert (
        status["details"]["name"] == "n1"
        and status["details"]["kind"] == "nodes"
        and status["details"]["uid"]
    )


# ---------------------------------------------------------------- injection, log, proxy, concurrency


def test_fail_next_and_delay_next(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    fake_kube.add(make_pod("p"))
    fake_kube.fail_next("POST", r"/pods/p/binding$", 500, message="etcdserver: request timed out")
    body = {"metadata": {"name": "p"}, "target": {"name": "n1"}}
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
    assert exc.value.status == 500
    assert status_body(exc.value)["message"] == "etcdserver: request timed out"
    assert status_body(exc.value)["reason"] == "InternalError"
    assert v1.create_namespaced_pod_binding("p", "default", body, _preload_content=False).status == 201
    fake_kube.fail_next("GET", r"^/api/v1/nodes$", 503, count=2, watch=False)
    for _ in range(2):
        with pytest.raises(ApiException) as exc:
            v1.list_node()
        assert exc.value.status == 503 and status_body(exc.value)["reason"] == "ServiceUnavailable"
    assert v1.list_node().items == []
    fake_kube.fail_next(
        "GET", r"^/api/v1/nodes$", 410, "Expired", "too old resource version: 1 (2)", watch=True
    )
    with pytest.raises(ApiException) as exc:
        list(watch.Watch().stream(v1.list_node, timeout_seconds=1))
    assert exc.value.status == 410
    # A hung server: urllib3 retries reads (3 times by default), then gives up.
    fake_kube.delay_next("GET", r"^/api/v1/nodes$", 0.5, count=None)
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.MaxRetryError) as timeout:
        v1.list_node(_request_timeout=0.1)
    assert isinstance(timeout.value.reason, urllib3.exceptions.ReadTimeoutError)
    assert time.monotonic() - started < 1.5
    fake_kube.clear_injections()
    assert v1.list_node().items == []


def test_request_log_tells_which_calls_were_made(fake_kube: FakeKube, v1: client.CoreV1Api) -> None:
    for name in ("n1", "n2"):
        fake_kube.add(make_node(name))
    fake_kube.clear_requests()
    for name in ("n1", "n2"):
        v1.patch_node(name, {"metadata": {"annotations": {"node_hot_value": "1,2026-11-22T07:00:00Z"}}})
    patches = fake_kube.find_requests("PATCH", r"^/api/v1/nodes/[^/]+$")
    assert sorted(r.path for r in patches) == ["/api/v1/nodes/n1", "/api/v1/nodes/n2"]
    assert {r.content_type for r in patches} == {"application/strategic-merge-patch+json"}
    assert patches[0].body == {"metadata": {"annotations": {"node_hot_value": "1,2026-11-22T07:00:00Z"}}}
    assert all(r.status == 200 for r in patches) and len(fake_kube.requests) == 2


def test_node_proxy_configz(fake_kube: FakeKube, kube_client: client.ApiClient) -> None:
    status, body = raw(kube_client, fake_kube, "GET", "/api/v1/nodes/n1/proxy/configz")
    assert (status, body["message"]) == (404, 'nodes "n1" not found')
    fake_kube.add(make_node("n1"))
    status, body = raw(kube_client, fake_kube, "GET", "/api/v1/nodes/n1/proxy/configz")
    assert (status, body["reason"]) == (503, "ServiceUnavailable")
    config = {"kubeletconfig": {"cpuManagerPolicy": "static", "topologyManagerPolicy": "single-numa-node"}}
    fake_kube.set_configz("n1", config)
    assert raw(kube_client, fake_kube, "GET", "/api/v1/nodes/n1/proxy/configz") == (200, config)


def test_control_api_errors_and_queries(fake_kube: FakeKube) -> None:
    fake_kube.add(make_node("n1"))
    with pytest.raises(FakeKubeError) as exc:
        fake_kube.add(make_node("n1"))
    assert exc.value.code == 409 and exc.value.reason == "AlreadyExists"
    stale = fake_kube.get("nodes", "n1")
    fake_kube.patch("nodes", "n1", {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(FakeKubeError) as exc:
        fake_kube.update(stale)
    assert exc.value.code == 409
    fake_kube.add(make_pod("p", node_name="n1"))
    running = fake_kube.patch(
        "pods", "p", {"status": {"phase": "Running"}}, namespace="default", subresource="status"
    )
    assert running["status"]["phase"] == "Running"
    assert [p["metadata"]["name"] for p in fake_kube.list("pods", field_selector="status.phase=Running")] == [
        "p"
    ]
    assert fake_kube.list("Pod")[0]["kind"] == "Pod"
    assert fake_kube.get("pods", "missing", namespace="default") is None


def test_concurrent_watches_requests_and_clean_stop(tmp_path: Any) -> None:
    fake = FakeKube().start()
    api = fake.api_client()
    v1 = client.CoreV1Api(api)
    results: dict[str, list[str]] = {"nodes": [], "pods": []}

    def consume(kind: str, func: Callable[..., Any]) -> None:
        try:
            for event in watch.Watch().stream(func, timeout_seconds=10):
                results[kind].append(event["type"])
        except urllib3.exceptions.ProtocolError:
            results[kind].append("BROKEN")

    threads = [
        threading.Thread(target=consume, args=("nodes", v1.list_node), daemon=True),
        threading.Thread(target=consume, args=("pods", v1.list_pod_for_all_namespaces), daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        assert fake.wait_for_watches(2)
        assert fake.open_watches("nodes") == 1 and fake.open_watches("pods") == 1
        for i in range(10):  # regular requests are served while both streams are open
            v1.create_node(make_node(f"n{i}"))
        v1.create_namespaced_pod("default", make_pod("p"))
        assert len(v1.list_node().items) == 10
        assert eventually(lambda: len(results["nodes"]) == 10 and len(results["pods"]) == 1)
    finally:
        started = time.monotonic()
        fake.stop()
        for thread in threads:
            thread.join(timeout=5)
        api.close()
    assert time.monotonic() - started < 3
    assert not any(thread.is_alive() for thread in threads)
    assert results["nodes"][-1] == "BROKEN" and results["pods"][-1] == "BROKEN"
    assert fake.open_watches() == 0
