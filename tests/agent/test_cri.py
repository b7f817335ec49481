"""The CRI client against an in-process gRPC runtime on a unix socket: exact requests, lookups, retries."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from ballast.agent.cpuset import CPUSet
from ballast.agent.cri import _stubs
from ballast.agent.cri.client import CRIClient, CRIError, api_pb2, normalize_endpoint
from ballast.testing.cri_fake import FakeRuntimeService, serve_fake_runtime

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def runtime():
    with serve_fake_runtime() as (service, endpoint):
        yield service, endpoint


def test_update_sends_only_the_cpuset_with_real_field_numbers(runtime) -> None:
    service, endpoint = runtime
    service.add_container("abc123", "uid-1", "app")
    with CRIClient(endpoint) as client:
        client.update_cpuset("abc123", CPUSet.parse("2-3"))
    # protocol.md section 5: container_id=1, linux=2, linux.cpuset_cpus=6, nothing else.
    assert service.raw_updates == [
        bytes.fromhex("0a 06 61 62 63 31 32 33 12 05 32 03 32 2d 33".replace(" ", ""))
    ]
    assert service.updates == [("abc123", "2-3")]


def test_update_refuses_an_empty_cpuset(runtime) -> None:
    _, endpoint = runtime
    with CRIClient(endpoint) as client, pytest.raises(ValueError, match="not specified"):
        client.update_cpuset("abc", CPUSet())


def test_version(runtime) -> None:
    _, endpoint = runtime
    with CRIClient(endpoint) as client:
        v = client.version()
    assert (v.runtime_name, v.runtime_api_version) == ("fake", "v1")


def test_find_container_by_kubelet_labels_takes_the_newest_attempt(runtime) -> None:
    service, endpoint = runtime
    service.add_container("old", "uid-1", "app", attempt=0)
    service.add_container("new", "uid-1", "app", attempt=1)
    service.add_container("dead", "uid-1", "app", attempt=2, running=False)
    service.add_container("other", "uid-1", "sidecar")
    service.add_container("elsewhere", "uid-2", "app")
    with CRIClient(endpoint) as client:
        assert client.find_container("uid-1", "app") == "new"
        assert client.find_container("uid-3", "app") is None
        assert {c.id for c in client.list_containers({"io.kubernetes.pod.uid": "uid-1"})} == {
            "old",
            "new",
            "other",
        }
        assert len(client.list_containers(running_only=False)) == 5
    assert service.list_filters[0] == {
        "io.kubernetes.pod.uid": "uid-1",
        "io.kubernetes.container.name": "app",
    }


def test_transient_failures_are_retried_with_backoff(runtime) -> None:
    service, endpoint = runtime
    service.add_container("c1", "uid", "app")
    service.fail_updates = [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED]
    sleeps: list[float] = []
    retried: list[tuple[str, grpc.StatusCode]] = []
    with CRIClient(
        endpoint, retries=3, backoff=0.1, sleep=sleeps.append, on_retry=lambda m, c: retried.append((m, c))
    ) as client:
        client.update_cpuset("c1", "1")
    assert len(service.raw_updates) == 3 and service.updates == [("c1", "1")]
    assert retried == [
        ("UpdateContainerResources", grpc.StatusCode.UNAVAILABLE),
        ("UpdateContainerResources", grpc.StatusCode.DEADLINE_EXCEEDED),
    ]
    assert 0.05 <= sleeps[0] <= 0.15 and 0.1 <= sleeps[1] <= 0.3, "exponential backoff with jitter"


def test_gives_up_after_the_retries(runtime) -> None:
    service, endpoint = runtime
    service.add_container("c1", "uid", "app")
    service.fail_updates = [grpc.StatusCode.UNAVAILABLE] * 5
    with CRIClient(endpoint, retries=2, sleep=lambda s: None) as client, pytest.raises(CRIError) as err:
        client.update_cpuset("c1", "1")
    assert err.value.attempts == 3 and err.value.code == grpc.StatusCode.UNAVAILABLE and err.value.retryable
    assert "after 3 attempts" in str(err.value)
    assert len(service.raw_updates) == 3


def test_not_found_is_not_retried(runtime) -> None:
    service, endpoint = runtime
    with CRIClient(endpoint, retries=3, sleep=lambda s: None) as client, pytest.raises(CRIError) as err:
        client.update_cpuset("missing", "0")
    assert err.value.not_found and err.value.attempts == 1
    assert len(service.raw_updates) == 1


def test_no_runtime_listening(tmp_path: Path) -> None:
    sock = tmp_path / "nothing.sock"
    with (
        CRIClient(f"unix://{sock}", timeout=0.5, retries=1, sleep=lambda s: None) as client,
        pytest.raises(CRIError) as err,
    ):
        client.update_cpuset("c", "0")
    assert err.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert err.value.attempts == 2


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("unix:///run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
        ("/run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
        ("unix:/run/crio/crio.sock", "unix:///run/crio/crio.sock"),
        (" unix:///var/run/cri-dockerd.sock ", "unix:///var/run/cri-dockerd.sock"),
    ],
)
def test_normalize_endpoint(given: str, expected: str) -> None:
    assert normalize_endpoint(given) == expected


@pytest.mark.parametrize(
    "bad", ["tcp://127.0.0.1:1234", "npipe:////./pipe/x", "unix://relative.sock", "x.sock"]
)
def test_normalize_endpoint_refuses(bad: str) -> None:
    with pytest.raises(ValueError, match="unix"):
        normalize_endpoint(bad)


def test_messages_use_the_upstream_field_numbers() -> None:
    fields = {f.name: f.number for f in api_pb2.LinuxContainerResources.DESCRIPTOR.fields} | {
        f"req.{f.name}": f.number for f in api_pb2.UpdateContainerResourcesRequest.DESCRIPTOR.fields
    }
    assert fields == {"cpuset_cpus": 6, "req.container_id": 1, "req.linux": 2}
    container = {f.name: f.number for f in api_pb2.Container.DESCRIPTOR.fields}
    assert container == {
        "id": 1,
        "pod_sandbox_id": 2,
        "metadata": 3,
        "state": 6,
        "created_at": 7,
        "labels": 8,
    }
    flt = {f.name: f.number for f in api_pb2.ContainerFilter.DESCRIPTOR.fields}
    assert flt == {"id": 1, "state": 2, "pod_sandbox_id": 3, "label_selector": 4}
    assert api_pb2.DESCRIPTOR.package == "runtime.v1"


def test_stubs_are_generated_into_a_cache_at_first_import(tmp_path: Path) -> None:
    """The editable-install path, in a fresh interpreter with an empty cache directory."""
    env = {**os.environ, "BALLAST_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    code = (
        "from ballast.agent.cri.client import api_pb2, api_pb2_grpc; "
        "print(api_pb2.__file__); print(api_pb2_grpc.RuntimeServiceStub.__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    lines = out.split()
    assert lines[0].startswith(str(tmp_path / "cache" / "cri-stubs")), out
    assert lines[1] == "RuntimeServiceStub"
    generated = list((tmp_path / "cache" / "cri-stubs").glob("*/ballast/agent/cri/api_pb2*.py"))
    assert sorted(p.name for p in generated) == ["api_pb2.py", "api_pb2_grpc.py"]
    assert not list((tmp_path / "cache" / "cri-stubs").glob(".gen-*")), "scratch dirs are cleaned up"


def test_protoc_errors_are_reported(tmp_path: Path) -> None:
    (tmp_path / "bad.proto").write_text('syntax = "proto3"; message X { strin y = 1; }')
    with pytest.raises(_stubs.StubGenerationError, match=r"bad\.proto"):
        _stubs.generate("bad.proto", tmp_path, tmp_path / "out")


def test_fake_service_is_the_generated_servicer() -> None:
    # Guard: the fake must stay a real servicer of the production proto, or these tests prove nothing.
    from ballast.agent.cri.client import api_pb2_grpc

    assert issubclass(FakeRuntimeService, api_pb2_grpc.RuntimeServiceServicer)


def test_runtime_check_reports_what_answers(runtime, tmp_path: Path) -> None:
    from ballast.agent.cpumanager.runtime import CRIRuntime, RuntimeCallError

    _, endpoint = runtime
    cri = CRIRuntime(endpoint)
    assert cri.check() == "fake 1.0 (CRI v1)"
    cri.close()
    dead = CRIRuntime(f"unix://{tmp_path}/none.sock", timeout=0.3, retries=0)
    with pytest.raises(RuntimeCallError, match=r"none\.sock") as err:
        dead.check()
    assert err.value.reason == "unavailable"
    dead.close()
