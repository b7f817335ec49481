"""The bind verb's API client (``ballast.kube.async_client`` over ``ballast.kube.lean``) against the real
kube-apiserver v1.36: it authenticates as the official client does (client certificates, the CA,
in-cluster tokens the kubelet rotates), keeps one deadline per verb, never retries, reuses its connections,
survives an API server that closed or reset them, and fails with the same ``ApiError`` as the official
path. Each test drives the awaited calls on one event loop of its own (``Blocking``)."""

from __future__ import annotations

import asyncio
import datetime as real_datetime
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.config import incluster_config

from ballast.kube.async_client import AsyncKube
from ballast.kube.client import ApiError, Kube, load_api_client
from ballast.testing.controlplane import ControlPlane, create_nodes, node_body, pod_body
from ballast.testing.faultproxy import FaultProxy

pytestmark = pytest.mark.integration

REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
PODS = "/api/v1/namespaces/default/pods"


class Blocking:
    """An ``AsyncKube`` called from a test: each call runs to its end on this object's event loop (its
    connections belong to that loop, as the extender's belong to uvicorn's)."""

    def __init__(self, kube: AsyncKube) -> None:
        self.kube = kube
        self.transport = kube.transport
        self.loop = asyncio.new_event_loop()

    def run(self, call: Any) -> Any:
        return self.loop.run_until_complete(call)

    def get(self, path: str) -> dict[str, Any]:
        return self.run(self.kube.get(path))

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.run(self.kube.create(path, body))

    def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.run(self.kube.merge_patch(path, patch))


REVIEW_BODY = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}


def whoami(kube: Blocking | Kube) -> str:
    """The user the API server authenticated this call as."""
    return kube.create(REVIEW, REVIEW_BODY)["status"]["userInfo"]["username"]


def lean(kubeconfig: Path | None, timeout: float = 5.0) -> Blocking:
    kube = AsyncKube.lean(Kube(load_api_client(str(kubeconfig) if kubeconfig else None), timeout=timeout))
    assert kube.transport is not None
    return Blocking(kube)


def binding(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": "default"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def edited_kubeconfig(cp: ControlPlane, name: str, edit: Any) -> Path:
    config = json.loads(cp.kubeconfig.read_text())
    edit(config)
    assert cp.workdir
    path = cp.workdir / f"{name}.kubeconfig"
    path.write_text(json.dumps(config))
    return path


def test_client_certificates_from_the_kubeconfig_and_one_connection_for_many_calls(
    cluster: ControlPlane,
) -> None:
    kube = lean(cluster.kubeconfig)
    for _ in range(20):
        assert whoami(kube) == "ballast-test-admin"
    assert kube.transport is not None and kube.transport.opened == 1
    # without the certificate the same server answers 403 to the anonymous user: the certificate was used
    bare = edited_kubeconfig(cluster, "no-cert", lambda c: c["users"][0].update(user={}))
    with pytest.raises(ApiError) as refused:
        lean(bare).get("/api/v1/nodes")
    assert refused.value.code in (401, 403)


def test_the_ca_bundle_is_the_kubeconfigs(cluster: ControlPlane) -> None:
    """Without the cluster's CA the serving certificate is refused (no answer: code 0); with
    ``insecure-skip-tls-verify`` it is accepted, as with the official client."""

    def drop_ca(config: dict[str, Any]) -> None:
        del config["clusters"][0]["cluster"]["certificate-authority"]

    def skip_verify(config: dict[str, Any]) -> None:
        drop_ca(config)
        config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True

    with pytest.raises(ApiError) as untrusted:
        lean(edited_kubeconfig(cluster, "no-ca", drop_ca)).get("/api/v1/nodes")
    assert untrusted.value.code == 0 and "CERTIFICATE_VERIFY_FAILED" in str(untrusted.value)
    assert whoami(lean(edited_kubeconfig(cluster, "skip-verify", skip_verify))) == "ballast-test-admin"


@pytest.fixture
def in_cluster(cluster: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The in-cluster service-account files of a pod, in a temporary directory, with a settable clock for
    the official loader's token refresh; yields (token file, clock offset setter, token maker)."""
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    shutil.copy(cluster.pki / "ca.crt", ca)
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(cluster.apiserver_port))
    offset = [0.0]

    class Clock(real_datetime.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
            return real_datetime.datetime.now(tz) + real_datetime.timedelta(seconds=offset[0])

    monkeypatch.setattr(
        incluster_config, "datetime", SimpleNamespace(datetime=Clock, timedelta=real_datetime.timedelta)
    )

    def issue(account: str) -> str:
        cluster.kubectl("create", "serviceaccount", account, check=False)
        return cluster.kubectl("create", "token", account, "--duration", "1h").strip()

    def later(seconds: float) -> None:
        offset[0] = seconds

    yield token, later, issue
    for account in ("first", "second"):
        cluster.kubectl("delete", "serviceaccount", account, "--ignore-not-found", check=False)


def test_an_in_cluster_token_the_kubelet_rotates_is_read_again(in_cluster: Any) -> None:
    """The official in-cluster loader re-reads the token file once its minute is up; the lean transport
    asks the same configuration at every call, so it sends the rotated token from then on."""
    token, later, issue = in_cluster
    token.write_text(issue("first"))
    kube = lean(None)
    assert kube.transport is not None
    assert whoami(kube) == "system:serviceaccount:default:first"
    token.write_text(issue("second"))  # the kubelet rotates the projected token
    assert whoami(kube) == "system:serviceaccount:default:first"  # within the loader's minute
    later(61)
    assert whoami(kube) == "system:serviceaccount:default:second"
    assert kube.transport.opened == 1  # a new token, the same connection


@pytest.fixture
def proxy(cluster: ControlPlane) -> Iterator[FaultProxy]:
    with FaultProxy(cluster) as p:
        yield p


def unbound_pod(cluster: ControlPlane, name: str) -> str:
    create_nodes(cluster.core(), [node_body("lean-node")])
    cluster.core().create_namespaced_pod("default", pod_body(name))
    return f"{PODS}/{name}"


@pytest.mark.parametrize("transport", ["lean", "official client in a thread"])
def test_one_deadline_per_verb(cluster: ControlPlane, proxy: FaultProxy, transport: str) -> None:
    """A call held by the API server uses up the verb's budget (not ``--api-timeout`` per call); the next
    call of the verb fails at once. The same over the lean transport and over the official client (a
    configuration the lean transport cannot serve), and the held call is never sent again."""
    path = unbound_pod(cluster, "lean-deadline")
    official = Kube(load_api_client(str(proxy.kubeconfig())), timeout=5.0)
    kube = Blocking(AsyncKube.lean(official) if transport == "lean" else AsyncKube(official))
    proxy.add("/lean-deadline$", "hold", method="GET")

    async def verb() -> list[ApiError]:
        errors = []
        with kube.kube.deadline(1.0):
            for call in (kube.kube.get(path), kube.kube.create(f"{path}/binding", binding("x", "lean-node"))):
                try:
                    await call
                except ApiError as exc:
                    errors.append(exc)
        return errors

    start = time.monotonic()
    held, after = kube.run(verb())
    assert time.monotonic() - start < 2.5  # one budget of 1 s for both, not 5 s (--api-timeout) each
    assert held.code == 0 and "Timeout" in str(held)
    assert after.code == 0  # the deadline passed, or the little left of it ran out
    assert len(proxy.requests("GET", "/lean-deadline$")) == 1
    proxy.clear()
    assert not official.get(path)["spec"].get("nodeName")


@pytest.mark.parametrize("status", [0, 500])
def test_one_attempt_when_the_reply_is_lost(cluster: ControlPlane, proxy: FaultProxy, status: int) -> None:
    """The API server bound the pod, the reply was lost (reset, or a 500 in its place): the transport says
    so and does not send the Binding again (the bind verb's second-bind rules decide what it means)."""
    path = unbound_pod(cluster, f"lean-lost-{status}")
    kube = lean(proxy.kubeconfig())
    proxy.add("/binding$", "lose", method="POST", status=status, times=1)
    with pytest.raises(ApiError) as lost:
        kube.create(f"{path}/binding", binding(f"lean-lost-{status}", "lean-node"))
    assert lost.value.code == status
    assert [s.status for s in proxy.requests("POST", "/binding$")] == [201]
    assert kube.get(path)["spec"]["nodeName"] == "lean-node"  # and the transport works on


def test_errors_are_the_official_clients(cluster: ControlPlane) -> None:
    """The same ``ApiError`` (code, reason, message, Status body) from either path, so the bind verb's rules
    (409 on the same node is success, ...) read them alike."""
    path = unbound_pod(cluster, "lean-errors")
    official = Kube(load_api_client(str(cluster.kubeconfig)), timeout=5.0)
    kube = Blocking(AsyncKube.lean(official))
    kube.create(f"{path}/binding", binding("lean-errors", "lean-node"))
    calls = [
        lambda k: k.get(f"{PODS}/no-such-pod"),
        lambda k: k.create(f"{path}/binding", binding("lean-errors", "lean-node")),
        lambda k: k.create(f"{PODS}/no-such-pod/binding", binding("no-such-pod", "lean-node")),
        lambda k: k.merge_patch(path, {"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}}),
        lambda k: k.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "Bad_Name"}}),
    ]
    codes = []
    for call in calls:
        seen = []
        for client in (official, kube):
            with pytest.raises(ApiError) as err:
                call(client)
            seen.append((err.value.code, err.value.reason, err.value.message, err.value.body))
        assert seen[0] == seen[1]
        codes.append(seen[0][0])
    assert codes == [404, 409, 404, 409, 422]


def test_recovers_after_the_api_server_resets_its_connections(cluster: ControlPlane) -> None:
    """kube-apiserver killed and started again on the same port: the pooled connection is dead; the next
    call notices before sending, opens a new one and succeeds (no retry of a request that was sent)."""
    kube = lean(cluster.kubeconfig)

    async def calls() -> list[str]:
        replies = await asyncio.gather(*(kube.kube.create(REVIEW, REVIEW_BODY) for _ in range(3)))
        return [r["status"]["userInfo"]["username"] for r in replies]

    results = kube.run(calls())  # three at once: three connections in the pool
    before = kube.transport.opened if kube.transport else 0
    assert before == 3
    cluster.restart_apiserver(kill=True)
    assert whoami(kube) == "ballast-test-admin"
    assert kube.transport is not None and kube.transport.opened == before + 1
    cluster.restart_apiserver(kill=False)  # a graceful stop closes them instead
    assert whoami(kube) == "ballast-test-admin"
    assert results == ["ballast-test-admin"] * 3
