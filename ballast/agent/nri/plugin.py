"""The agent as an NRI plugin: registers with the runtime and answers it while containers are created.

The exchange (containerd/nri ``pkg/api/api.proto``; containerd >= 1.7 with NRI enabled):

1. The plugin connects to the runtime's socket (``/var/run/nri/nri.sock``) and calls
   ``Runtime.RegisterPlugin`` with its name and a two-digit index (plugins are called in index order).
2. The runtime calls ``Plugin.Configure``; the answer names the events the plugin wants: here
   CreateContainer (to answer with a cpuset) and RemoveContainer (to forget the container). The runtime's
   request timeout comes with it (2 s by default): an answer later than that and the runtime drops the
   plugin.
3. The runtime calls ``Plugin.Synchronize`` with the pods and containers that exist (in pieces while
   ``more`` is set); the answer updates those whose cpuset is not what the ``Pinner`` wants.
4. For each container created, ``Plugin.CreateContainer``: the answer adjusts the new container's cpuset
   and updates the others the ``Pinner`` says changed (a pod took exclusive CPUs), before it starts.
5. Between requests the plugin may call ``Runtime.UpdateContainers`` (``update``). The agent does not:
   containerd's NRI up to nri v0.12.0 can deadlock on it (``ballast.agent.nri.runtime``); its later
   updates go through CRI.

``NRIPlugin.run(stop)`` connects, registers and reconnects with backoff when the runtime goes away (a
containerd restart); ``connected`` says whether it is registered now.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from ballast.agent.cpuset import CPUSet, CPUSetParseError
from ballast.agent.nri.messages import pb
from ballast.agent.nri.ttrpc import UNIMPLEMENTED, ConnectionClosed, TtrpcConnection, TtrpcError

__all__ = [
    "DEFAULT_SOCKET",
    "PLUGIN_INDEX",
    "PLUGIN_NAME",
    "PLUGIN_SERVICE",
    "RUNTIME_SERVICE",
    "NRIPlugin",
    "Pinner",
    "event_mask",
]

log = logging.getLogger("ballast.agent.nri")

DEFAULT_SOCKET = "/var/run/nri/nri.sock"
PLUGIN_NAME = "ballast"
PLUGIN_INDEX = "50"
"""Where among the runtime's plugins Ballast's adjustment comes (they are called in index order)."""
PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"


def event_mask(*events: int) -> int:
    """NRI's event mask: bit ``event - 1`` for each event."""
    mask = 0
    for e in events:
        mask |= 1 << (e - 1)
    return mask


SUBSCRIBED = event_mask(pb.CREATE_CONTAINER, pb.REMOVE_CONTAINER)


class Pinner(Protocol):
    """What the plugin asks (the CPU manager)."""

    def pin_at_creation(
        self, pod_uid: str, container_name: str, container_id: str, *, known_only: bool = False
    ) -> tuple[CPUSet | None, dict[str, CPUSet]]: ...

    def forget_container(self, container_id: str) -> None: ...


def _container_key(pod: pb.PodSandbox, container: pb.Container) -> tuple[str, str]:
    """(pod UID, container name): the sandbox's UID, else the kubelet's labels on the container."""
    uid = pod.uid or container.labels.get(POD_UID_LABEL, "")
    name = container.labels.get(CONTAINER_NAME_LABEL, "") or container.name
    return uid, name


def _update(container_id: str, cpus: CPUSet) -> pb.ContainerUpdate:
    return pb.ContainerUpdate(
        container_id=container_id,
        linux=pb.LinuxContainerUpdate(resources=pb.LinuxResources(cpu=pb.LinuxCPU(cpus=str(cpus)))),
    )


class NRIPlugin:
    """The plugin (see the module docstring). ``pinner`` may be set after construction, before ``run``."""

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        pinner: Pinner | None = None,
        *,
        name: str = PLUGIN_NAME,
        index: str = PLUGIN_INDEX,
        observe: Callable[[str, float], None] | None = None,
        on_state: Callable[[bool, str], None] | None = None,
    ) -> None:
        """``observe(method, seconds)`` is told how long each answer took; ``on_state(connected, detail)``
        when the plugin registers or loses its connection."""
        if not (len(index) == 2 and index.isdigit()):
            raise ValueError(f"an NRI plugin index is two digits, not {index!r}")
        self.socket_path = socket_path
        self.pinner = pinner
        self.name = name
        self.index = index
        self.observe = observe
        self.on_state = on_state
        self.runtime = ""
        """``"containerd 1.7.24"``, from Configure."""
        self.request_timeout = 2.0
        self._conn: TtrpcConnection | None = None
        self._configured = threading.Event()
        self._sync_pods: list[pb.PodSandbox] = []
        self._sync_containers: list[pb.Container] = []

    # --- connection ---------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        conn = self._conn
        return conn is not None and not conn.closed and self._configured.is_set()

    def connect(self, registration_timeout: float = 5.0) -> None:
        """Connect, register and wait for Configure; raises ``OSError``, ``TtrpcError`` or
        ``ConnectionClosed`` when that fails."""
        if self.pinner is None:
            raise RuntimeError("NRIPlugin needs a pinner before it connects")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self._configured.clear()
        conn = TtrpcConnection(sock, self._handle, name="nri")
        self._conn = conn
        request = pb.RegisterPluginRequest(plugin_name=self.name, plugin_idx=self.index)
        conn.call(
            RUNTIME_SERVICE, "RegisterPlugin", request.SerializeToString(), timeout=registration_timeout
        )
        if not self._configured.wait(registration_timeout):
            conn.close()
            raise TtrpcError(4, f"registered but not configured within {registration_timeout:.0f}s")

    def run(self, stop: threading.Event, *, retry: float = 1.0, max_retry: float = 30.0) -> None:
        """Stay registered until ``stop``: connect, and again after the runtime hangs up (backoff)."""
        delay = retry
        last_error = ""
        while not stop.is_set():
            try:
                self.connect()
            except (OSError, TtrpcError, ConnectionClosed) as e:
                message = f"cannot register with the NRI socket {self.socket_path}: {e}"
                if message != last_error:
                    log.warning("%s; retrying", message)
                    last_error = message
                self._state(False, message)
                stop.wait(delay)
                delay = min(delay * 2, max_retry)
                continue
            delay, last_error = retry, ""
            log.info(
                "NRI plugin %s-%s registered with %s at %s: containers get their cpuset when created",
                self.index,
                self.name,
                self.runtime or "the runtime",
                self.socket_path,
            )
            self._state(True, self.runtime)
            conn = self._conn
            assert conn is not None
            while not stop.is_set() and not conn.wait_closed(0.2):
                pass
            if not stop.is_set():
                log.warning("NRI connection lost (%s): reconnecting", conn.close_reason)
                self._state(False, f"connection lost: {conn.close_reason}")
        self.close()

    def _state(self, connected: bool, detail: str) -> None:
        if self.on_state is not None:
            self.on_state(connected, detail)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # --- calls to the runtime -----------------------------------------------------------------------

    def update(self, cpusets: Mapping[str, CPUSet]) -> list[str]:
        """``Runtime.UpdateContainers`` with these cpusets; the ids the runtime could not update.
        Raises ``ConnectionClosed`` when not connected, ``TtrpcError`` when the call fails."""
        conn = self._conn
        if conn is None or not self.connected:
            raise ConnectionClosed("the NRI plugin is not registered")
        request = pb.UpdateContainersRequest(update=[_update(cid, cpus) for cid, cpus in cpusets.items()])
        # The runtime holds its NRI lock while it applies the update: no longer than its own request timeout.
        raw = conn.call(
            RUNTIME_SERVICE, "UpdateContainers", request.SerializeToString(), timeout=self.request_timeout
        )
        return [u.container_id for u in pb.UpdateContainersResponse.FromString(raw).failed]

    # --- requests from the runtime ------------------------------------------------------------------

    def _handle(self, service: str, method: str, payload: bytes) -> bytes:
        if service != PLUGIN_SERVICE:
            raise TtrpcError(UNIMPLEMENTED, f"service {service}")
        handler = self._methods.get(method)
        if handler is None:
            raise TtrpcError(UNIMPLEMENTED, f"method {method}")
        started = time.perf_counter()
        try:
            return handler(self, payload)
        finally:
            if self.observe is not None:
                self.observe(method, time.perf_counter() - started)

    def _configure(self, payload: bytes) -> bytes:
        request = pb.ConfigureRequest.FromString(payload)
        self.runtime = f"{request.runtime_name} {request.runtime_version}".strip()
        if request.request_timeout > 0:
            self.request_timeout = request.request_timeout / 1000
        self._sync_pods, self._sync_containers = [], []
        self._configured.set()
        return pb.ConfigureResponse(events=SUBSCRIBED).SerializeToString()

    def _synchronize(self, payload: bytes) -> bytes:
        request = pb.SynchronizeRequest.FromString(payload)
        self._sync_pods.extend(request.pods)
        self._sync_containers.extend(request.containers)
        if request.more:
            return pb.SynchronizeResponse(more=True).SerializeToString()
        pods = {p.id: p for p in self._sync_pods}
        containers, self._sync_pods, self._sync_containers = self._sync_containers, [], []
        assert self.pinner is not None
        updates: dict[str, CPUSet] = {}
        for c in containers:
            if c.state not in (pb.CONTAINER_CREATED, pb.CONTAINER_RUNNING):
                continue
            pod = pods.get(c.pod_sandbox_id, pb.PodSandbox())
            uid, name = _container_key(pod, c)
            if not uid:
                continue
            cpus, others = self.pinner.pin_at_creation(uid, name, c.id, known_only=True)
            updates.update(others)
            if cpus is not None and _current_cpus(c) != cpus:
                updates[c.id] = cpus
        log.info("NRI synchronized: %d containers, %d cpuset updates", len(containers), len(updates))
        response = pb.SynchronizeResponse(update=[_update(cid, cpus) for cid, cpus in updates.items()])
        return response.SerializeToString()

    def _create_container(self, payload: bytes) -> bytes:
        request = pb.CreateContainerRequest.FromString(payload)
        uid, name = _container_key(request.pod, request.container)
        response = pb.CreateContainerResponse()
        if not uid:  # not a kubelet's container: the runtime's defaults
            return response.SerializeToString()
        assert self.pinner is not None
        cpus, others = self.pinner.pin_at_creation(uid, name, request.container.id)
        if cpus is not None:
            response.adjust.linux.resources.cpu.cpus = str(cpus)
        response.update.extend(_update(cid, c) for cid, c in others.items())
        log.info(
            "NRI CreateContainer %s/%s %s (%s): cpuset %s, %d other containers updated",
            request.pod.namespace,
            request.pod.name,
            name,
            request.container.id[:13],
            cpus,
            len(others),
        )
        return response.SerializeToString()

    def _state_change(self, payload: bytes) -> bytes:
        event = pb.StateChangeEvent.FromString(payload)
        if event.event == pb.REMOVE_CONTAINER and self.pinner is not None:
            self.pinner.forget_container(event.container.id)
        return pb.Empty().SerializeToString()

    def _empty_update(self, payload: bytes) -> bytes:
        return pb.UpdateContainerResponse().SerializeToString()

    def _stop_container(self, payload: bytes) -> bytes:
        return pb.StopContainerResponse().SerializeToString()

    def _shutdown(self, payload: bytes) -> bytes:
        log.info("the runtime asked the NRI plugin to shut down")
        return pb.Empty().SerializeToString()

    _methods: dict[str, Callable[[NRIPlugin, bytes], bytes]] = {
        "Configure": _configure,
        "Synchronize": _synchronize,
        "CreateContainer": _create_container,
        "StateChange": _state_change,
        "UpdateContainer": _empty_update,
        "StopContainer": _stop_container,
        "Shutdown": _shutdown,
    }


def _current_cpus(container: pb.Container) -> CPUSet | None:
    text = container.linux.resources.cpu.cpus
    try:
        return CPUSet.parse(text) if text else None
    except CPUSetParseError:
        return None


def socket_present(path: str) -> bool:
    """Whether ``path`` is a unix socket (NRI is on in the runtime)."""
    try:
        import stat

        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False
