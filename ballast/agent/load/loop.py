"""The load reporter's wiring in ``ballast agent --report-load``: build it from the flags, run it on its
own thread, stop it.

The pods come from the agent's one watch on this node's pods (``ballast.agent.pod_watch``, shared with the CPU
manager) into ``ballast.agent.load.pods.NodePods``. Where the pod cgroups are (driver, ``cgroupRoot``,
``cgroupsPerQOS``) is the kubelet's say (its configuration, as the NRT publisher reads it); when the
kubelet's settings cannot be read, the tree says it (``guess_layout``) and the reporter asks the kubelet
again when no pod cgroup can be found. The history's checkpoint sits beside the CPU manager's
(``--cpu-state-file``'s directory).
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from ballast.agent.cgroup_paths import CgroupLayout
from ballast.agent.load.cgroups import PodCgroups
from ballast.agent.load.checkpoint import HistoryCheckpoint
from ballast.agent.load.metrics import LoadMetrics
from ballast.agent.load.pods import NodePods
from ballast.agent.load.procfs import ProcError, ProcReader
from ballast.agent.load.reporter import LoadReporter
from ballast.agent.load.sampler import Sampler
from ballast.agent.pod_watch import NodePodWatch
from ballast.kube.client import Kube
from ballast.model.policy import Policy, PolicyError, load_policy
from ballast.model.policy_store import PolicyStore
from ballast.program.skeleton import PolicyReload

__all__ = [
    "CHECKPOINT_NAME",
    "LoadLoop",
    "LoadSetupError",
    "check_load_flags",
    "guess_layout",
    "start_load_reporting",
]

log = logging.getLogger("ballast.agent.load")

CHECKPOINT_NAME = "load_history"
FIRST_LIST_WAIT_SECONDS = 5.0


class LoadSetupError(Exception):
    """The flags cannot give a working load reporter; the message says which and why."""


def guess_layout(root: Path) -> CgroupLayout:
    """The kubelet's layout as the tree shows it: ``kubepods.slice`` (systemd) or ``kubepods`` (cgroupfs) at
    the top, else one level down when exactly one parent holds it (kind's ``/kubelet``); the kubelet's
    defaults when nothing says more."""
    base = PodCgroups(root).cpu_base

    def holds(layout: CgroupLayout) -> bool:
        parts = layout.kubepods_parts()
        return parts is not None and base.joinpath(*parts).is_dir()

    for layout in (CgroupLayout("systemd"), CgroupLayout("cgroupfs")):
        if holds(layout):
            return layout
    try:
        names = [d.name for d in base.iterdir() if d.is_dir()]
    except OSError:
        return CgroupLayout()
    below = [layout for layout in map(_rooted_at, names) if holds(layout)]
    return below[0] if len(below) == 1 else CgroupLayout()


def _rooted_at(name: str) -> CgroupLayout:
    """The layout of a kubelet whose ``cgroupRoot`` is the top-level folder ``name``."""
    if name.endswith(".slice"):
        return CgroupLayout("systemd", "/" + name.removesuffix(".slice"))
    return CgroupLayout("cgroupfs", "/" + name)


class LoadLoop:
    """The reporter's thread: a tick every sample interval, the policy file checked before each."""

    def __init__(
        self,
        reporter: LoadReporter,
        store: PolicyStore,
        reflector: Any,
        interval: float,
        hangup: threading.Event | None = None,
    ) -> None:
        self.reporter = reporter
        self.store = store
        self.reflector = reflector
        self.interval = interval
        self.reload = PolicyReload(store, None, hangup or threading.Event())
        """Before each tick: the policy file read again on SIGHUP or when it changed."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-reporter", daemon=True)

    def start(self) -> None:
        self.reflector.start()
        self._thread.start()

    def _run(self) -> None:
        self.reflector.wait_synced(FIRST_LIST_WAIT_SECONDS)
        next_tick = time.monotonic()
        while not self._stop.is_set():
            self.reload.check()
            try:
                self.reporter.tick()
            except Exception:
                log.exception("load report failed unexpectedly; retrying on the next tick")
            next_tick += self.interval
            now = time.monotonic()
            if next_tick < now:  # a tick took longer than the interval: skip the missed ones
                next_tick = now + self.interval
            self._stop.wait(next_tick - now)

    def stop(self) -> None:
        self._stop.set()
        self.reflector.stop()
        self._thread.join(10)


def check_load_flags(args: argparse.Namespace) -> Policy:
    """The policy the flags name, once ``/proc`` proved readable: checked before the agent makes any API
    request. ``LoadSetupError`` says which flag cannot work and why."""
    if args.policy is None:
        raise LoadSetupError(
            "--report-load needs --policy FILE (the DynamicSchedulerPolicy, the shipped ConfigMap)"
        )
    try:
        policy = load_policy(args.policy)
    except (PolicyError, OSError) as e:
        raise LoadSetupError(f"--policy {args.policy}: {e}") from None
    proc = ProcReader(args.proc_root)
    try:
        proc.cpu_times()
        proc.meminfo()
    except (ProcError, OSError) as e:
        raise LoadSetupError(f"--proc-root {args.proc_root}: {e}") from None
    return policy


def start_load_reporting(
    args: argparse.Namespace,
    policy: Policy,
    kube: Kube,
    pod_watch: NodePodWatch,
    node_name: str,
    registry: CollectorRegistry,
    node: Callable[[], Mapping[str, Any] | None],
    kubelet_layout: Callable[[], CgroupLayout | None],
    hangup: threading.Event | None = None,
) -> LoadLoop:
    """Build and start the load loop with the policy ``check_load_flags`` read."""
    proc = ProcReader(args.proc_root)
    layout = kubelet_layout()
    if layout is None:
        layout = guess_layout(args.cgroup_root)
        log.warning("kubelet settings unreadable: pod cgroups guessed from the tree (%s)", layout.describe())
    cgroups = PodCgroups(args.cgroup_root, layout)
    log.info(
        "reporting load every %gs (NodeLoad every %gs): /proc at %s, pod cgroups %s",
        args.load_sample_interval,
        args.load_report_interval,
        args.proc_root,
        cgroups.describe(),
    )
    metrics = LoadMetrics(registry)
    store = PolicyStore(policy, args.policy, metrics)
    pods = NodePods(node_name)
    reporter = LoadReporter(
        kube,
        node_name,
        Sampler(proc, cgroups),
        pods,
        lambda: store.current,
        node,
        checkpoint=HistoryCheckpoint(Path(args.cpu_state_file).parent / CHECKPOINT_NAME),
        metrics=metrics,
        sample_interval=args.load_sample_interval,
        report_interval=args.load_report_interval,
        layout=kubelet_layout,
    )
    loop = LoadLoop(reporter, store, pod_watch.subscribe(pods), args.load_sample_interval, hangup)
    loop.start()
    return loop
