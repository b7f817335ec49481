"""``ballast agent`` run mode: the node agent's main loop and its wiring.

``run(args)`` builds, in order: the node name (``--node-name``, else ``NODE_NAME`` from the downward
API), the topology (discovered once and logged), the API client, the kubelet settings source, the
``Publisher``, the health/metrics endpoint, and a watch on this one Node. Then it loops until SIGTERM or
SIGINT: publish, let the CPU manager follow what was published, wait ``--resync`` or until the Node's
labels change, and again. Shutdown stops the watches, the CPU manager and the endpoint.

The CPU manager (``ballast.agent.cpumanager.manager.CPUManager``) runs only while the published NRT says
``cpuManagerPolicy: Static`` (not when the kubelet's own static manager pins CPUs, nor with
``--cpu-manager=off``), and restarts when the kubelet's reserved CPUs change. See ``CPUManagerSupervisor``.
Where the runtime offers NRI (``--nri-socket`` exists, ``--nri auto``) the manager also runs as an NRI
plugin: containers are created on their cpuset (``ballast.agent.nri``); elsewhere the CRI reconcile alone
sets cpusets, after creation. The mode is logged, exported (``ballast_agent_pinning_mode``) and in
``/readyz``'s answer.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from ballast import __version__
from ballast.agent.cgroup_paths import CgroupLayout
from ballast.agent.cpumanager.state import HeldCPUs
from ballast.agent.cpuset import CPUSet
from ballast.agent.nrt.publisher import (
    KubeletConfigFile,
    KubeletConfigz,
    KubeletSource,
    NodeHandler,
    Published,
    Publisher,
    PublisherMetrics,
)
from ballast.agent.pod_watch import NodePodWatch
from ballast.agent.topology.model import CPUTopology, TopologyError
from ballast.agent.topology.sysfs import read_topology
from ballast.contract.exclusive import DEFAULT_SCHEDULERS
from ballast.contract.seal import SealKeyError, load_key
from ballast.kube.client import Kube, KubeConfigError, Reflector, connect
from ballast.model.policy import Policy
from ballast.program.health import Probe
from ballast.program.skeleton import HealthFailed, Refused, Signals, serve_health

__all__ = ["CPUManagerSupervisor", "published_probe", "run"]

log = logging.getLogger("ballast.agent")

NODE_RELIST_SECONDS = 300.0
"""The Node watch relists this often on top of its events (repairs anything a lost event hid)."""
POD_RELIST_SECONDS = 300.0
INITIAL_NODE_WAIT_SECONDS = 5.0
"""How long the first publish waits for the Node watch's list, so it needs no GET of its own."""
_STOP_POLL_SECONDS = 0.2

NODE_NAME_MISSING = (
    "ballast agent: --node-name is required when the NODE_NAME environment variable is not set "
    "(in a DaemonSet set NODE_NAME from the downward API: valueFrom.fieldRef.fieldPath: spec.nodeName)"
)


# --- readiness -----------------------------------------------------------------------------------------


def published_probe(published: threading.Event, detail: Callable[[], str] | None = None) -> Probe:
    """``/readyz`` of the agent: ready once the NodeResourceTopology was published; ``detail`` (how CPUs
    are pinned) follows the answer."""

    def ready() -> tuple[bool, str]:
        more = f"; {text}" if detail is not None and (text := detail()) else ""
        if published.is_set():
            return True, "ok" + more
        return False, "not ready: the NodeResourceTopology was not published yet" + more

    return ready


# --- CPU manager --------------------------------------------------------------------------------------


class RunningManager:
    """One started CPU manager: the manager, its pod watch, its loop thread, and its NRI plugin's thread
    when it has one."""

    def __init__(self, manager: Any, reflector: Any, reserved: CPUSet, plugin: Any = None) -> None:
        self.manager = manager
        self.reflector = reflector
        self.reserved = reserved
        self.plugin = plugin
        self.stop_event = threading.Event()
        self.thread = threading.Thread(
            target=manager.run, args=(self.stop_event,), name="cpu-manager", daemon=True
        )
        reflector.start()
        self.thread.start()
        self.plugin_thread: threading.Thread | None = None
        if plugin is not None:
            self.plugin_thread = threading.Thread(
                target=plugin.run, args=(self.stop_event,), name="nri-plugin", daemon=True
            )
            self.plugin_thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.reflector.stop()
        if self.plugin_thread is not None:
            self.plugin_thread.join(5)
        self.thread.join(10)
        self.manager.close()


ManagerFactory = Callable[[CPUSet], RunningManager]


class CPUManagerSupervisor:
    """HOOK for the CPU manager: started while the published NRT says ``cpuManagerPolicy: Static``.

    ``update(published)`` is called after every publish attempt. With ``factory=None`` (``--cpu-manager
    off``) nothing is ever started. A failed start is logged (once per message) and retried on the next
    update; nothing is started before the first successful publish.
    """

    def __init__(
        self, factory: ManagerFactory | None, on_assignments: Callable[[], None] | None = None
    ) -> None:
        self.factory = factory
        self.running: RunningManager | None = None
        self.on_assignments = on_assignments
        """Told when the running manager's pinned CPUs change (the loop republishes the NRT)."""
        self._last_error: str | None = None

    def update(self, published: Published | None) -> None:
        if self.factory is None or published is None:
            return
        want = published.cpu_manager_policy == "Static"
        if self.running is not None and (not want or self.running.reserved != published.reserved):
            why = "reserved CPUs changed" if want else "the NRT now says cpuManagerPolicy None"
            log.info("stopping the CPU manager: %s", why)
            self._stop()
        if want and self.running is None:
            try:
                self.running = self.factory(published.reserved)
                self.running.manager.on_assignments = self.on_assignments
            except Exception as e:
                message = f"cannot start the CPU manager: {type(e).__name__}: {e}"
                if message != self._last_error:
                    log.exception("%s; retrying after the next publish", message)
                self._last_error = message
                return
            self._last_error = None
            log.info("CPU manager started (reserved CPUs: %s)", published.reserved or "none")
            if self.on_assignments is not None:
                self.on_assignments()  # publish its (restored) assignments, even none

    def _stop(self) -> None:
        running, self.running = self.running, None
        if running is not None:
            try:
                running.stop()
            except Exception:
                log.exception("stopping the CPU manager failed")

    def close(self) -> None:
        self._stop()

    def pinning(self) -> str:
        """How containers get their cpusets now, for ``/readyz``: ``pinning: nri (containerd 1.7.24)``,
        ``pinning: cri``; empty while no manager runs."""
        running = self.running
        if running is None:
            return ""
        plugin = running.plugin
        if plugin is not None and plugin.connected:
            return f"pinning: nri ({plugin.runtime})" if plugin.runtime else "pinning: nri"
        return "pinning: cri"

    def held(self) -> dict[str, HeldCPUs] | None:
        """The running manager's pinned CPUs per pod UID (``CPUManager.held``); ``None`` while none runs,
        which the crane NRT tells apart from "nothing pinned"."""
        running = self.running
        return running.manager.held() if running is not None else None


def cpu_manager_factory(
    args: argparse.Namespace,
    kube: Kube,
    topology: CPUTopology,
    node_name: str,
    registry: CollectorRegistry,
    runtime_factory: Callable[[], Any] | None = None,
    pod_watch: NodePodWatch | None = None,
    layout: Callable[[], CgroupLayout | None] | None = None,
) -> ManagerFactory:
    """Build CPU managers from the command line; ``runtime_factory`` replaces the CRI runtime (tests);
    ``pod_watch`` is the agent's shared watch on the node's pods (without it each manager has its own);
    ``layout`` says where the kubelet puts pod cgroups, for reading cpusets back (``None``: not read)."""
    metrics: Any = None

    def start(reserved: CPUSet) -> RunningManager:
        nonlocal metrics
        # Imported on first start: a node that never runs the manager never loads gRPC.
        from ballast.agent.cpumanager.manager import CPUManager
        from ballast.agent.cpumanager.metrics import CPUManagerMetrics
        from ballast.agent.cpumanager.runtime import CRIRuntime

        if metrics is None:  # registered once: a restarted manager keeps counting in the same series
            metrics = CPUManagerMetrics(registry)
        runtime = runtime_factory() if runtime_factory is not None else CRIRuntime(args.cri_endpoint)
        plugin = _nri_plugin(args, metrics)
        if plugin is not None:
            from ballast.agent.nri.runtime import NRIRuntime

            runtime = NRIRuntime(plugin, runtime)
        try:
            manager = CPUManager(
                topology,
                reserved,
                args.cpu_state_file,
                runtime,
                allowed_schedulers=args.scheduler_names or DEFAULT_SCHEDULERS,
                default_policy=args.default_cpu_policy,
                node_name=node_name,
                reconcile_period=args.cpu_manager_reconcile_period,
                metrics=metrics,
                result_key=getattr(args, "result_key", None),
                readback=_cpuset_reader(args, layout() if layout is not None else None),
            )
        except BaseException:
            runtime.close()
            raise
        if plugin is not None:
            plugin.pinner = manager
        pods = (
            pod_watch.subscribe(manager)
            if pod_watch is not None
            else manager.pod_reflector(kube, resync_seconds=POD_RELIST_SECONDS)
        )
        return RunningManager(manager, pods, reserved, plugin)

    return start


def _nri_plugin(args: argparse.Namespace, metrics: Any) -> Any:
    """The NRI plugin when the runtime offers NRI (``--nri auto`` and the socket exists), else ``None``;
    says which mode the agent pins in (log, ``ballast_agent_pinning_mode``)."""
    socket_path = getattr(args, "nri_socket", "/var/run/nri/nri.sock")
    mode = getattr(args, "nri", "off")
    from ballast.agent.nri.plugin import NRIPlugin, socket_present

    def set_mode(nri: bool, detail: str = "") -> None:
        metrics.pinning_mode.labels("nri").set(1 if nri else 0)
        metrics.pinning_mode.labels("cri").set(0 if nri else 1)

    if mode == "off" or not socket_present(socket_path):
        why = "--nri off" if mode == "off" else f"no NRI socket at {socket_path} (containerd < 1.7, NRI off)"
        log.info("pinning mode cri: %s; containers get their cpuset by reconcile, after creation", why)
        set_mode(False)
        return None
    log.info("pinning mode nri: registering with %s; the CRI reconcile keeps repairing", socket_path)
    set_mode(False)  # until registered

    def observe(method: str, seconds: float) -> None:
        metrics.nri_requests.labels(method).observe(seconds)

    return NRIPlugin(socket_path, observe=observe, on_state=set_mode)


def _cpuset_reader(args: argparse.Namespace, layout: CgroupLayout | None) -> Any:
    """Reads each container's cpuset back from its cgroup (``--cgroup-root``), or ``None`` when the
    kubelet's cgroup layout is unknown or has no pod cgroups."""
    if layout is None or not layout.per_qos:
        log.warning("the kubelet's cgroup layout is unknown: cpusets are not read back")
        return None
    from ballast.agent.cpumanager.runtime import CgroupfsRuntime

    root = getattr(args, "cgroup_root", "/sys/fs/cgroup")
    try:
        return CgroupfsRuntime(root, driver=layout.driver, cgroup_root=layout.root)  # type: ignore[arg-type]
    except (OSError, ValueError) as e:
        log.warning("cpusets are not read back: %s", e)
        return None


# --- main loop ----------------------------------------------------------------------------------------


def _wait(stop: threading.Event, wake: threading.Event, seconds: float) -> None:
    """Sleep ``seconds`` or until ``wake`` (Node labels changed) or ``stop`` is set."""
    deadline = time.monotonic() + seconds
    while not stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0 or wake.wait(min(_STOP_POLL_SECONDS, remaining)):
            break
    wake.clear()


def _kubelet_layout(source: KubeletSource) -> CgroupLayout | None:
    """Where the kubelet puts pod cgroups, or ``None`` when its settings cannot be read now."""
    try:
        return source.settings().cgroup_layout
    except Exception as e:
        log.warning("kubelet settings unreadable (%s): the pod cgroups are looked for in the tree", e)
        return None


def describe_topology(topology: CPUTopology) -> str:
    numa = "; ".join(f"node{n}: CPUs {topology.cpus_in_numa(n)}" for n in topology.numa_ids)
    return (
        f"{topology.num_cpus} CPUs, {topology.num_cores} cores, {topology.num_sockets} socket(s), "
        f"{topology.num_numa_nodes} NUMA node(s) ({numa})"
    )


@dataclass(frozen=True)
class AgentConfig:
    """What the flags name, checked before any API call."""

    node_name: str
    topology: CPUTopology
    load_policy: Policy | None
    """The policy of ``--report-load``; ``None`` without it."""


def configure(args: argparse.Namespace) -> AgentConfig:
    """The agent's configuration from its flags, or ``Refused`` saying what to fix. Sets
    ``args.result_key`` (the seal key of ``--result-key-file``, ``None`` without one)."""
    node_name = args.node_name or os.environ.get("NODE_NAME", "")
    if not node_name:
        raise Refused(NODE_NAME_MISSING, usage=True)
    try:
        topology = read_topology(args.sysfs)
    except TopologyError as e:
        raise Refused(f"topology discovery failed: {e}", code=1) from None
    log.info("node %s: %s", node_name, describe_topology(topology))
    try:
        args.result_key = load_key(args.result_key_file) if getattr(args, "result_key_file", None) else None
    except SealKeyError as e:
        raise Refused(str(e)) from None
    if args.result_key is None:
        log.warning(
            "no --result-key-file: topology results are trusted by schedulerName alone, which whoever may "
            "create pods can set (see docs/security.md, What the agent trusts)"
        )
    load_policy = None
    if getattr(args, "report_load", False):
        from ballast.agent.load.loop import LoadSetupError, check_load_flags

        try:
            load_policy = check_load_flags(args)
        except LoadSetupError as e:
            raise Refused(str(e)) from None
    return AgentConfig(node_name, topology, load_policy)


def run(
    args: argparse.Namespace,
    *,
    stop: threading.Event | None = None,
    runtime_factory: Callable[[], Any] | None = None,
) -> int:
    """Run the agent until SIGTERM/SIGINT (or ``stop`` is set); returns the exit code.

    2: no node name, no usable cluster configuration, or ``--report-load`` flags that cannot work;
    1: topology discovery failed or the metrics port cannot be bound; 0: clean shutdown.
    """
    try:
        config = configure(args)
        kube = connect(args.kubeconfig, f"ballast-agent/{__version__}")
    except Refused as e:
        return e.report(log)
    except KubeConfigError as e:
        log.error("%s", e)
        return 2
    return _serve(args, config, kube, stop or threading.Event(), runtime_factory)


def _serve(
    args: argparse.Namespace,
    config: AgentConfig,
    kube: Kube,
    stop: threading.Event,
    runtime_factory: Callable[[], Any] | None,
) -> int:
    """Publish, pin and measure until ``stop``: the watches, the CPU manager, the load loop and the health
    endpoint, all stopped on the way out."""
    node_name, topology, load_policy = config.node_name, config.topology, config.load_policy
    registry = CollectorRegistry()
    metrics = PublisherMetrics(registry)
    source: KubeletSource
    if args.kubelet_configz:
        source = KubeletConfigz(kube, node_name, metrics=metrics)
    else:
        source = KubeletConfigFile(args.kubelet_config, metrics)
    log.info("kubelet settings from %s", source.description)
    enabled = args.cpu_manager == "on"
    wake = threading.Event()
    # One watch on this node's pods for the CPU manager and the load reporter (ballast.agent.pod_watch).
    pod_watch = NodePodWatch(
        kube, node_name, resync_seconds=POD_RELIST_SECONDS, stall_seconds=args.watch_stall_timeout
    )
    factory = (
        cpu_manager_factory(
            args,
            kube,
            topology,
            node_name,
            registry,
            runtime_factory,
            pod_watch,
            lambda: _kubelet_layout(source),
        )
        if enabled
        else None
    )
    # A manager that assigns or releases CPUs wakes the publish loop: crane's zone status and the community
    # object's ``available`` follow assignments at once rather than at the next resync.
    supervisor = CPUManagerSupervisor(factory, on_assignments=wake.set)
    publisher = Publisher(
        kube,
        node_name,
        topology,
        source,
        metrics=metrics,
        cpu_manager_enabled=enabled,
        publish=args.publish,
        held=supervisor.held,
    )
    log.info("publishing NodeResourceTopology: %s", ", ".join(sorted(args.publish)))
    try:
        server = serve_health(
            args, registry, name="agent-health", ready=published_probe(publisher.ready, supervisor.pinning)
        )
    except HealthFailed:
        kube.close()
        return 1

    node_watch = Reflector(
        kube,
        "/api/v1/nodes",
        NodeHandler(publisher, wake.set),
        params={"fieldSelector": f"metadata.name={node_name}"},
        name=f"node/{node_name}",
        resync_seconds=NODE_RELIST_SECONDS,
    )
    # ---- HOOK: the CPU manager follows the published cpuManagerPolicy (CPUManagerSupervisor) ----
    load_loop: Any = None
    hangup = threading.Event() if load_policy is not None else None
    with Signals(stop, hangup=hangup, wake=wake, then="shutting down", logger=log):
        try:
            node_watch.start()
            node_watch.wait_synced(min(INITIAL_NODE_WAIT_SECONDS, args.resync))
            wake.clear()  # the first list is "a change"; the publish below covers it
            if load_policy is not None:
                from ballast.agent.load.loop import start_load_reporting

                load_loop = start_load_reporting(
                    args,
                    load_policy,
                    kube,
                    pod_watch,
                    node_name,
                    registry,
                    publisher.node,
                    lambda: _kubelet_layout(source),
                    hangup,
                )
            while not stop.is_set():
                publisher.publish_once()
                supervisor.update(publisher.published)
                _wait(stop, wake, args.resync)
        finally:
            if load_loop is not None:
                load_loop.stop()
            node_watch.stop()
            supervisor.close()
            pod_watch.stop()
            if server is not None:
                server.close()
            kube.close()
    log.info("agent stopped")
    return 0
