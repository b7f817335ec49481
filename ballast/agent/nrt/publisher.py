"""Publishing this node's ``NodeResourceTopology``: read the inputs, build the object, write only changes.

One ``Publisher.publish_once()`` is one decision, made against what the API server stores:

- the object is missing: ``POST`` it (when a concurrent writer wins the race, the ``409`` is followed by a
  re-read and a merge patch);
- it differs in what Ballast owns (``nrt_merge_patch`` is not empty): one JSON merge ``PATCH`` carrying
  only that difference;
- otherwise nothing is written. Quantities compare by value, so a server that stores ``"4000m"`` for
  ``"4"`` does not cause a write on every resync.

Inputs: the topology (discovered once by the caller; sysfs does not change under a running agent), the
kubelet settings (``KubeletConfigFile``, re-read each time, or ``KubeletConfigz``, fetched through the
API server's node proxy at start and then at most every ``CONFIGZ_REFRESH_SECONDS``) and the Node (uid
and labels), fed by a watch through ``NodeHandler`` or read with a GET when no watch has delivered it.

Failures never raise out of ``publish_once``: they are logged with the server's message (once per
distinct message, repeats at debug level), counted, and the next call simply tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from prometheus_client import CollectorRegistry

from ballast.agent.cpumanager.cpu_assignment import NotEnoughCPUsError
from ballast.agent.cpuset import CPUSet
from ballast.agent.kubelet_config import (
    KubeletConfigError,
    KubeletSettings,
    load_kubelet_config,
    parse_configz,
)
from ballast.agent.nrt.community import Held, build_community_nrt, community_merge_patch
from ballast.agent.nrt.crane import CPU_MANAGER_DISABLED_ATTRIBUTE, build_nrt, nrt_merge_patch
from ballast.agent.topology.model import CPUTopology
from ballast.agent.topology.reserved import reserved_cpus
from ballast.contract.nrt import API_VERSION, COMMUNITY_API_VERSION, COMMUNITY_GROUP, GROUP, PLURAL
from ballast.kube.client import ApiError, Kube, path_for
from ballast.program.metrics import MetricSet

__all__ = [
    "CONFIGZ_REFRESH_SECONDS",
    "CRD_MANIFEST",
    "KubeletConfigFile",
    "KubeletConfigz",
    "KubeletSource",
    "NodeHandler",
    "Published",
    "Publisher",
    "PublisherMetrics",
    "Result",
]

log = logging.getLogger("ballast.agent.publisher")

CONFIGZ_REFRESH_SECONDS = 600.0
"""configz goes API server -> kubelet; crane fetched it every 10 s on every node (weakness 29)."""
CONFIGZ_RETRY_SECONDS = 60.0
"""After a failed configz refresh, the last good settings are kept and the fetch is retried this late."""
CRD_MANIFEST = "scheduler_config/crd-noderesourcetopology.yaml"
COMMUNITY_CRD_MANIFEST = "scheduler_config/crd-noderesourcetopology-v1alpha2.yaml"
PUBLISHABLE = ("crane", "community")
"""What ``--publish`` may name: crane's ``topology.crane.io/v1alpha1``, the community v1alpha2."""
CPU_MANAGER_OFF_REASON = "the Ballast agent runs with --cpu-manager=off: cpusets are not managed on this node"


class Result(StrEnum):
    """What one publish did (the ``result`` label of ``ballast_agent_nrt_publishes_total``)."""

    CREATED = "created"
    PATCHED = "patched"
    UNCHANGED = "unchanged"
    ERROR = "error"


class PublisherMetrics:
    """The publisher's Prometheus metrics, on a registry the agent owns (shared with the CPU manager's)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        m = MetricSet("ballast_agent", registry)
        self.registry = m.registry
        results = [result.value for result in Result]  # every series from the start: rate() works from zero
        self.publishes = m.counter(
            "nrt_publishes",
            "NodeResourceTopology publish attempts by result (created, patched, unchanged, error).",
            "result",
            zero=results,
        )
        self.last_success = m.gauge(
            "nrt_last_success_timestamp_seconds",
            "Unix time of the last publish that left the NodeResourceTopology up to date.",
        )
        self.community_publishes = m.counter(
            "community_nrt_publishes",
            "Community NodeResourceTopology (v1alpha2, --publish community) publish attempts by result.",
            "result",
            zero=results,
        )
        self.kubelet_config_reads = m.counter(
            "kubelet_config_reads",
            "Reads of the kubelet configuration by source (file, configz) and result (ok, error).",
            "source",
            "result",
        )


# --- kubelet settings ---------------------------------------------------------------------------------


class KubeletSource(Protocol):
    description: str

    def settings(self) -> KubeletSettings:
        """The current settings; raises ``KubeletConfigError`` or ``ApiError`` when none can be had."""
        ...


class KubeletConfigFile:
    """The kubelet's ``KubeletConfiguration`` file on this node, read on every call (a small local file)."""

    def __init__(self, path: Path | str, metrics: PublisherMetrics | None = None) -> None:
        self.path = Path(path)
        self.description = f"kubelet config file {self.path}"
        self.metrics = metrics

    def settings(self) -> KubeletSettings:
        try:
            if not self.path.exists():
                raise KubeletConfigError(
                    f"{self.path}: no such file (mount the kubelet's config file into the agent's pod, "
                    "or read the settings from the API server with --kubelet-configz)"
                )
            settings = load_kubelet_config(self.path)
        except KubeletConfigError:
            self._count("error")
            raise
        self._count("ok")
        return settings

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.kubelet_config_reads.labels("file", result).inc()


class KubeletConfigz:
    """The kubelet's live configuration through ``GET /api/v1/nodes/{node}/proxy/configz``.

    Fetched on the first call and then at most every ``refresh_seconds``: each fetch travels API server ->
    kubelet. A failed refresh keeps the last good settings (logged) and retries after ``retry_seconds``;
    without any good settings yet, the error is raised and the next call fetches again.
    """

    def __init__(
        self,
        kube: Kube,
        node_name: str,
        *,
        refresh_seconds: float = CONFIGZ_REFRESH_SECONDS,
        retry_seconds: float = CONFIGZ_RETRY_SECONDS,
        metrics: PublisherMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.node_name = node_name
        self.path = f"/api/v1/nodes/{quote(node_name, safe='')}/proxy/configz"
        self.description = f"configz of node {node_name}"
        self.refresh_seconds = refresh_seconds
        self.retry_seconds = retry_seconds
        self.metrics = metrics
        self._clock = clock
        self._settings: KubeletSettings | None = None
        self._next_fetch = 0.0

    def settings(self) -> KubeletSettings:
        now = self._clock()
        if self._settings is not None and now < self._next_fetch:
            return self._settings
        try:
            settings = parse_configz(self.kube.get(self.path), self.description)
        except (ApiError, KubeletConfigError) as e:
            self._count("error")
            if self._settings is None:
                raise
            self._next_fetch = now + min(self.retry_seconds, self.refresh_seconds)
            log.warning(
                "refreshing the kubelet settings from %s failed (%s); keeping the last good ones, "
                "retrying in %.0fs",
                self.description,
                e,
                self._next_fetch - now,
            )
            return self._settings
        self._count("ok")
        self._settings = settings
        self._next_fetch = now + self.refresh_seconds
        return settings

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.kubelet_config_reads.labels("configz", result).inc()


# --- publishing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Published:
    """What the last successful publish stated (the CPU manager follows ``cpu_manager_policy``)."""

    cpu_manager_policy: str
    topology_manager_policy: str
    reserved: CPUSet
    result: Result


class _Failed(Exception):
    """A publish step failed; ``message`` is the one log line for it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Publisher:
    """Keeps ``noderesourcetopologies/<node>`` equal to what this node's inputs say (module docstring)."""

    def __init__(
        self,
        kube: Kube,
        node_name: str,
        topology: CPUTopology,
        kubelet: KubeletSource,
        *,
        metrics: PublisherMetrics | None = None,
        cpu_manager_enabled: bool = True,
        wall_clock: Callable[[], float] = time.time,
        publish: Collection[str] = ("crane",),
        held: Callable[[], Held | None] | None = None,
    ) -> None:
        """``publish``: which objects to write (``PUBLISHABLE``); ``held``: the CPUs the CPU manager has
        handed out, per pod (``CPUManager.held``; ``None`` while no manager runs), which crane's object
        publishes per zone and the community object's ``available`` subtracts."""
        self.kube = kube
        self.node_name = node_name
        self.topology = topology
        self.kubelet = kubelet
        self.metrics = metrics or PublisherMetrics()
        self.cpu_manager_enabled = cpu_manager_enabled
        self._wall_clock = wall_clock
        self.publish = frozenset(publish)
        self.held = held
        self.collection = path_for(API_VERSION, PLURAL)
        self.community_collection = path_for(COMMUNITY_API_VERSION, PLURAL)
        self.community_path = path_for(COMMUNITY_API_VERSION, PLURAL, name=node_name)
        self._community_error: str | None = None
        self.path = path_for(API_VERSION, PLURAL, name=node_name)
        self.node_path = path_for("v1", "nodes", name=node_name)
        self.ready = threading.Event()
        """Set after the first publish that left the object up to date (``/readyz``)."""
        self.published: Published | None = None
        self._lock = threading.Lock()
        self._publish_lock = threading.Lock()
        self._node: Mapping[str, Any] | None = None
        self._last_error: str | None = None
        self._failures = 0
        self._static_kubelet: bool | None = None
        if not cpu_manager_enabled:
            log.info("CPU manager disabled (--cpu-manager=off): the NRT says cpuManagerPolicy None")

    # --- the Node -----------------------------------------------------------------------------------

    def observe_node(self, node: Mapping[str, Any] | None) -> bool:
        """Record the Node as a watch delivered it (``None``: deleted). True when its uid or labels
        changed, i.e. when the NRT may need to change."""
        with self._lock:
            before, self._node = self._node, node
        return _node_key(before) != _node_key(node)

    def node(self) -> Mapping[str, Any] | None:
        """The Node as the watch last delivered it (``None`` before the first list, or once deleted)."""
        with self._lock:
            return self._node

    def _current_node(self) -> Mapping[str, Any]:
        with self._lock:
            node = self._node
        if node is not None:
            return node
        try:
            node = self.kube.get(self.node_path)
        except ApiError as e:
            if e.code == 404:
                raise _Failed(f"Node {self.node_name} does not exist: {e.message}") from None
            raise _Failed(f"reading Node {self.node_name}: {e}") from None
        with self._lock:
            if self._node is None:  # a watch event that came meanwhile is newer
                self._node = node
        return node

    # --- one publish --------------------------------------------------------------------------------

    def desired(self) -> tuple[dict[str, Any], CPUSet]:
        """The NRT this node should have now, and the reserved CPUs it was built with."""
        try:
            settings = self.kubelet.settings()
        except KubeletConfigError as e:  # its message names the file or configz already
            raise _Failed(f"reading the kubelet settings: {e}") from None
        except ApiError as e:
            raise _Failed(f"reading the kubelet settings from {self.kubelet.description}: {e}") from None
        self._note_kubelet_policy(settings)
        node = self._current_node()
        meta = node.get("metadata") or {}
        try:
            reserved = reserved_cpus(self.topology, settings)
        except NotEnoughCPUsError as e:
            raise _Failed(f"kubelet reserved CPUs from {self.kubelet.description}: {e}") from None
        nrt = build_nrt(
            node_name=self.node_name,
            node_uid=str(meta.get("uid") or ""),
            topology=self.topology,
            kubelet=settings,
            node_labels=meta.get("labels") or {},
            reserved=reserved,
            exclusive=self._exclusive(),
        )
        if not self.cpu_manager_enabled and nrt["craneManagerPolicy"]["cpuManagerPolicy"] != "None":
            nrt["craneManagerPolicy"]["cpuManagerPolicy"] = "None"
            nrt.setdefault("attributes", {})[CPU_MANAGER_DISABLED_ATTRIBUTE] = CPU_MANAGER_OFF_REASON
        return nrt, reserved

    def _held(self) -> Held | None:
        return self.held() if self.held is not None else None

    def _exclusive(self) -> dict[str, CPUSet] | None:
        """Pod UID -> pinned CPUs for crane's zones; ``None`` (nothing per pod) while no manager runs."""
        held = self._held() if self.cpu_manager_enabled else None
        return None if held is None else {uid: h[2] for uid, h in held.items()}

    def publish_once(self) -> Result:
        """Bring the stored NRT up to date; never raises for API, kubelet or config failures."""
        with self._publish_lock:
            try:
                desired, reserved = self.desired()
                result = self._sync(desired) if "crane" in self.publish else Result.UNCHANGED
                if "community" in self.publish:
                    self._publish_community(desired)
            except _Failed as e:
                self._fail(e.message)
                return Result.ERROR
            except Exception as e:  # a bug must not stop the agent: log it whole, retry next time
                log.exception("publishing NodeResourceTopology %s failed unexpectedly", self.node_name)
                self._fail(f"unexpected {type(e).__name__}: {e}")
                return Result.ERROR
            self.metrics.publishes.labels(result.value).inc()
            self.metrics.last_success.set(self._wall_clock())
            policy = desired["craneManagerPolicy"]
            self.published = Published(
                policy["cpuManagerPolicy"], policy["topologyManagerPolicy"], reserved, result
            )
            if self._failures:
                log.info(
                    "NodeResourceTopology %s published again after %d failed attempt(s)",
                    self.node_name,
                    self._failures,
                )
            self._failures, self._last_error = 0, None
            self.ready.set()
            return result

    def _sync(self, desired: dict[str, Any]) -> Result:
        try:
            existing = self.kube.get(self.path)
        except ApiError as e:
            if e.code != 404:
                raise _Failed(f"reading NodeResourceTopology {self.node_name}: {e}") from None
            return self._create(desired)
        return self._patch(existing, desired)

    def _create(self, desired: dict[str, Any]) -> Result:
        try:
            self.kube.create(self.collection, desired)
        except ApiError as e:
            if e.code == 409:
                log.info("NodeResourceTopology %s was created concurrently; patching it", self.node_name)
                try:
                    existing = self.kube.get(self.path)
                except ApiError as e2:
                    raise _Failed(f"re-reading NodeResourceTopology {self.node_name}: {e2}") from None
                return self._patch(existing, desired)
            if e.code == 404:
                raise _Failed(
                    f"the NodeResourceTopology CRD (noderesourcetopologies.{GROUP}) is not installed: "
                    f"apply {CRD_MANIFEST} (kubectl apply -f {CRD_MANIFEST}); "
                    f"the agent keeps retrying (server said: {e.message})"
                ) from None
            raise _Failed(f"creating NodeResourceTopology {self.node_name}: {e}") from None
        log.info("created NodeResourceTopology %s (%s)", self.node_name, _summary(desired))
        return Result.CREATED

    def _patch(self, existing: Mapping[str, Any], desired: dict[str, Any]) -> Result:
        patch = nrt_merge_patch(existing, desired)
        if not patch:
            log.debug("NodeResourceTopology %s is up to date", self.node_name)
            return Result.UNCHANGED
        try:
            self.kube.merge_patch(self.path, patch)
        except ApiError as e:
            raise _Failed(f"patching NodeResourceTopology {self.node_name}: {e}") from None
        log.info(
            "patched NodeResourceTopology %s: %s changed (%s)",
            self.node_name,
            ", ".join(sorted(patch)),
            _summary(desired),
        )
        return Result.PATCHED

    # --- the community object -----------------------------------------------------------------------

    def _publish_community(self, crane: Mapping[str, Any]) -> None:
        """Bring ``topology.node.k8s.io/v1alpha2`` up to date; its failures are its own (counted, logged
        once per message) and never stop the crane object or the CPU manager."""
        try:
            desired = build_community_nrt(crane, self.topology, self._held() or {})
            result = self._sync_community(desired)
        except _Failed as e:
            self.metrics.community_publishes.labels(Result.ERROR.value).inc()
            if e.message != self._community_error:
                log.error("%s", e.message)
                self._community_error = e.message
            return
        self.metrics.community_publishes.labels(result.value).inc()
        self._community_error = None

    def _sync_community(self, desired: dict[str, Any]) -> Result:
        what = f"NodeResourceTopology {COMMUNITY_API_VERSION} {self.node_name}"
        try:
            existing = self.kube.get(self.community_path)
        except ApiError as e:
            if e.code != 404:
                raise _Failed(f"reading {what}: {e}") from None
            existing = None
        if existing is None:
            try:
                self.kube.create(self.community_collection, desired)
            except ApiError as e:
                if e.code == 404:
                    raise _Failed(
                        f"the community NodeResourceTopology CRD (noderesourcetopologies."
                        f"{COMMUNITY_GROUP}) is not installed: apply {COMMUNITY_CRD_MANIFEST} or NFD's; "
                        f"the agent keeps retrying (server said: {e.message})"
                    ) from None
                raise _Failed(f"creating {what}: {e}") from None
            log.info("created %s", what)
            return Result.CREATED
        patch = community_merge_patch(existing, desired)
        if not patch:
            return Result.UNCHANGED
        try:
            self.kube.merge_patch(self.community_path, patch)
        except ApiError as e:
            raise _Failed(f"patching {what}: {e}") from None
        log.info("patched %s: %s changed", what, ", ".join(sorted(patch)))
        return Result.PATCHED

    # --- logging ------------------------------------------------------------------------------------

    def _fail(self, message: str) -> None:
        self.metrics.publishes.labels(Result.ERROR.value).inc()
        self._failures += 1
        if message != self._last_error:
            log.error("%s", message)
            self._last_error = message
        else:
            log.debug("still failing (%d attempts): %s", self._failures, message)

    def _note_kubelet_policy(self, settings: KubeletSettings) -> None:
        static = settings.cpu_manager_is_static
        if static == self._static_kubelet:
            return
        if static:
            log.warning(
                "the kubelet's cpuManagerPolicy is static (%s): the NRT says cpuManagerPolicy None, because "
                "the kubelet pins exclusive CPUs itself and two managers would fight over cpusets; "
                "Ballast's CPU manager stays off on this node",
                self.kubelet.description,
            )
        elif self._static_kubelet is not None:
            log.info(
                "the kubelet's cpuManagerPolicy is now %r (%s)",
                settings.cpu_manager_policy,
                self.kubelet.description,
            )
        self._static_kubelet = static


def _node_key(node: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    if node is None:
        return None
    meta = node.get("metadata") or {}
    return (meta.get("uid"), dict(meta.get("labels") or {}))


def _summary(nrt: Mapping[str, Any]) -> str:
    policy = nrt.get("craneManagerPolicy") or {}
    zones = []
    for zone in nrt.get("zones") or []:
        allocatable = (zone.get("resources") or {}).get("allocatable") or {}
        zones.append(f"{zone.get('name')}: {allocatable.get('cpu', '?')} CPUs allocatable")
    return (
        f"cpuManagerPolicy={policy.get('cpuManagerPolicy')}, "
        f"topologyManagerPolicy={policy.get('topologyManagerPolicy')}; {', '.join(zones)}"
    )


class NodeHandler:
    """``ballast.kube.client.Reflector`` handler for a watch on this one Node: feeds the publisher and calls
    ``on_change`` when the Node's uid or labels changed (the awareness label drives the NRT)."""

    def __init__(self, publisher: Publisher, on_change: Callable[[], None]) -> None:
        self.publisher = publisher
        self.on_change = on_change

    def replace(self, objects: list[dict[str, Any]], resource_version: str) -> None:
        name = self.publisher.node_name
        node = next((o for o in objects if (o.get("metadata") or {}).get("name") == name), None)
        self._observe(node)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        if (obj.get("metadata") or {}).get("name") != self.publisher.node_name:
            return
        self._observe(None if event_type == "DELETED" else obj)

    def _observe(self, node: Mapping[str, Any] | None) -> None:
        if not self.publisher.observe_node(node):
            return
        if node is None:
            log.warning(
                "Node %s was deleted; the NRT is republished when it is back", self.publisher.node_name
            )
            return
        log.debug("Node %s labels or uid changed; republishing", self.publisher.node_name)
        self.on_change()
