"""The agent's NRI plugin against a runtime written here that speaks NRI's real framing on a unix socket
(``tests.agent.test_nri_transport.Peer``), with the real CPU manager behind it: registration, Configure's
event mask, Synchronize, CreateContainer's cpuset and the updates of the others, UpdateContainers from the
reconcile, and a runtime that goes away and comes back."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ballast.agent.cpumanager.manager import CPUManager
from ballast.agent.cpumanager.runtime import MemoryRuntime
from ballast.agent.cpuset import CPUSet
from ballast.agent.nri.messages import pb
from ballast.agent.nri.plugin import PLUGIN_SERVICE, RUNTIME_SERVICE, NRIPlugin
from ballast.agent.nri.runtime import NRIRuntime
from ballast.testing.cri_fake import NODE, SCHEDULER, container, container_id, pod, zones
from tests.agent.kubelet_topologies import DUAL_SOCKET_HT
from tests.agent.test_nri_transport import PLUGIN, RUNTIME, Peer, trunk_bytes, ttrpc_bytes

ALL = DUAL_SOCKET_HT.all_cpus  # 0-11; NUMA 0 even, NUMA 1 odd


class FakeRuntime:
    """containerd's side of one plugin connection: the test drives it step by step."""

    def __init__(self, path: Path) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(1)
        self.listener.settimeout(5)
        self.peer: Peer | None = None
        self.stream = 1

    def accept(self) -> Peer:
        sock, _ = self.listener.accept()
        self.peer = Peer(sock)
        return self.peer

    def expect_call(self, method: str) -> tuple[int, bytes]:
        """The plugin's next call on the Runtime connection: (stream, payload)."""
        assert self.peer is not None
        conn, stream, kind, raw = self.peer.receive()
        request = pb.Request.FromString(raw)
        assert (conn, kind, request.service, request.method) == (RUNTIME, 1, RUNTIME_SERVICE, method)
        return stream, request.payload

    def answer(self, stream: int, message) -> None:  # type: ignore[no-untyped-def]
        assert self.peer is not None
        body = pb.Response(payload=message.SerializeToString()).SerializeToString()
        self.peer.send(trunk_bytes(RUNTIME, ttrpc_bytes(stream, 2, body)))

    def call(self, method: str, message, reply_type):  # type: ignore[no-untyped-def]
        """Call the plugin; (its answer, seconds it took)."""
        assert self.peer is not None
        stream, self.stream = self.stream, self.stream + 2
        started = time.perf_counter()
        self.peer.send(self.peer.request(PLUGIN, stream, PLUGIN_SERVICE, method, message.SerializeToString()))
        conn, got, response = self.peer.response()
        took = time.perf_counter() - started
        assert (conn, got, response.status.code) == (PLUGIN, stream, 0), response.status.message
        return reply_type.FromString(response.payload), took

    def close(self) -> None:
        if self.peer is not None:
            self.peer.sock.close()
        self.listener.close()


def nri_pod(p: dict) -> pb.PodSandbox:
    meta = p["metadata"]
    return pb.PodSandbox(id="sb-" + meta["name"], name=meta["name"], uid=meta["uid"], namespace="default")


def nri_container(p: dict, name: str, cid: str, cpus: str = "") -> pb.Container:
    c = pb.Container(
        id=cid,
        pod_sandbox_id="sb-" + p["metadata"]["name"],
        name=name,
        state=pb.CONTAINER_RUNNING,
        labels={"io.kubernetes.pod.uid": p["metadata"]["uid"], "io.kubernetes.container.name": name},
    )
    c.linux.resources.cpu.cpus = cpus
    return c


def updates_of(message) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {u.container_id: u.linux.resources.cpu.cpus for u in message.update}


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[dict]:
    path = tmp_path / "nri.sock"
    fake = FakeRuntime(path)
    memory = MemoryRuntime()
    plugin = NRIPlugin(str(path))
    manager = CPUManager(
        DUAL_SOCKET_HT,
        CPUSet(),
        tmp_path / "state",
        NRIRuntime(plugin, memory),
        allowed_schedulers=[SCHEDULER],
        node_name=NODE,
        pod_wait=0.3,
    )
    plugin.pinner = manager
    stop = threading.Event()
    thread = threading.Thread(target=plugin.run, args=(stop,), kwargs={"retry": 0.05}, daemon=True)
    thread.start()
    yield {"fake": fake, "plugin": plugin, "manager": manager, "memory": memory, "stop": stop}
    stop.set()
    fake.close()
    thread.join(5)


def register(fake: FakeRuntime, plugin: NRIPlugin) -> pb.ConfigureResponse:
    fake.accept()
    stream, raw = fake.expect_call("RegisterPlugin")
    request = pb.RegisterPluginRequest.FromString(raw)
    assert (request.plugin_name, request.plugin_idx) == ("ballast", "50")
    fake.answer(stream, pb.Empty())
    configured, _ = fake.call(
        "Configure",
        pb.ConfigureRequest(runtime_name="containerd", runtime_version="1.7.24", request_timeout=2000),
        pb.ConfigureResponse,
    )
    deadline = time.monotonic() + 5
    while not plugin.connected and time.monotonic() < deadline:
        time.sleep(0.01)
    assert plugin.connected and plugin.runtime == "containerd 1.7.24"
    return configured


def test_registers_subscribes_to_create_and_remove_and_pins_at_creation(rig: dict) -> None:
    fake, plugin, manager = rig["fake"], rig["plugin"], rig["manager"]
    configured = register(fake, plugin)
    assert configured.events == (1 << 3) | (1 << 10)  # CREATE_CONTAINER, REMOVE_CONTAINER

    web = pod("web", [container("app", "1", "1Gi", request_cpu="500m")])
    ex = pod("ex", [container("app", "2", "1Gi")], result=zones(node1=2))
    web_id = container_id(web["metadata"]["uid"], "app")
    manager.on_pods([web])

    # Synchronize, in two pieces: the web container runs on CPUs 0-3 (someone's doing), a container of a
    # pod the agent does not know is left alone; the answer puts web on the shared pool.
    more, _ = fake.call(
        "Synchronize", pb.SynchronizeRequest(pods=[nri_pod(web)], more=True), pb.SynchronizeResponse
    )
    assert more.more and not more.update
    stranger = pod("stranger", [container("app", None, None)])
    synced, _ = fake.call(
        "Synchronize",
        pb.SynchronizeRequest(
            pods=[nri_pod(stranger)],
            containers=[nri_container(web, "app", web_id, "0-3"), nri_container(stranger, "app", "s1", "0")],
        ),
        pb.SynchronizeResponse,
    )
    assert updates_of(synced) == {web_id: "0-11"} and not synced.more

    # The exclusive pod is created: its container gets two NUMA-1 CPUs, the web container loses them.
    manager.on_pod_event("ADDED", ex)
    ex_id = container_id(ex["metadata"]["uid"], "app")
    created, took = fake.call(
        "CreateContainer",
        pb.CreateContainerRequest(pod=nri_pod(ex), container=nri_container(ex, "app", ex_id)),
        pb.CreateContainerResponse,
    )
    mine = CPUSet.parse(created.adjust.linux.resources.cpu.cpus)
    assert len(mine) == 2 and not mine - CPUSet.parse("1,3,5,7,9,11")
    assert updates_of(created) == {web_id: str(ALL - mine)}
    assert manager.state.get_cpuset(ex["metadata"]["uid"], "app") == mine
    assert took < 2.0  # containerd's request timeout

    # A container restart of the same pod: same CPUs, nobody else moves.
    again, _ = fake.call(
        "CreateContainer",
        pb.CreateContainerRequest(pod=nri_pod(ex), container=nri_container(ex, "app", ex_id + "-1")),
        pb.CreateContainerResponse,
    )
    assert CPUSet.parse(again.adjust.linux.resources.cpu.cpus) == mine and not again.update


def test_a_pod_the_watch_has_not_named_gets_the_shared_pool_and_a_foreign_container_nothing(
    rig: dict,
) -> None:
    fake, plugin, manager = rig["fake"], rig["plugin"], rig["manager"]
    register(fake, plugin)
    ex = pod("ex", [container("app", "2", "1Gi")], result=zones(node0=2))
    manager.on_pods([ex])
    ex_id = container_id(ex["metadata"]["uid"], "app")
    fake.call(
        "CreateContainer",
        pb.CreateContainerRequest(pod=nri_pod(ex), container=nri_container(ex, "app", ex_id)),
        pb.CreateContainerResponse,
    )
    mine = manager.state.get_cpuset(ex["metadata"]["uid"], "app")
    assert mine is not None
    ghost = pod("ghost", [container("app", None, None)])
    created, took = fake.call(
        "CreateContainer",
        pb.CreateContainerRequest(pod=nri_pod(ghost), container=nri_container(ghost, "app", "g1")),
        pb.CreateContainerResponse,
    )
    assert CPUSet.parse(created.adjust.linux.resources.cpu.cpus) == ALL - mine
    assert 0.25 < took < 2.0  # waited pod_wait for the watch, then answered
    bare = pb.Container(id="x", name="not-kube")
    created, _ = fake.call(
        "CreateContainer", pb.CreateContainerRequest(container=bare), pb.CreateContainerResponse
    )
    assert not created.HasField("adjust") and not created.update


def test_the_reconcile_updates_through_cri_never_nri_and_a_restarted_runtime_is_registered_with_again(
    rig: dict,
) -> None:
    """Unsolicited NRI UpdateContainers can deadlock containerd's NRI (see ballast.agent.nri.runtime): the
    reconcile's updates go through CRI while the plugin is registered, and the fake runtime sees none."""
    fake, plugin, manager, memory = rig["fake"], rig["plugin"], rig["manager"], rig["memory"]
    register(fake, plugin)
    ex = pod("ex", [container("app", "2", "1Gi")], result=zones(node1=2))
    web = pod("web", [container("app", None, None)])
    web_id = container_id(web["metadata"]["uid"], "app")
    manager.on_pods([ex, web])
    result = manager.reconcile_once()
    mine = manager.state.get_cpuset(ex["metadata"]["uid"], "app")
    assert result.updates == 2 and dict(memory.calls)[web_id] == ALL - mine
    assert fake.peer is not None
    fake.peer.sock.settimeout(0.3)
    with pytest.raises(TimeoutError):
        fake.peer.receive()  # nothing was sent to the runtime over NRI
    fake.peer.sock.settimeout(5)

    # The runtime goes away and comes back: the plugin registers again.
    fake.peer.sock.close()
    deadline = time.monotonic() + 5
    while plugin.connected and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not plugin.connected
    manager.on_pod_event("DELETED", ex)
    manager.reconcile_once()
    assert memory.calls[-1] == (web_id, ALL)
    register(fake, plugin)
