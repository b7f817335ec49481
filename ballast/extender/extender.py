"""The extender verbs as plain methods on parsed requests: no HTTP and no JSON here (answers are plain
values the HTTP layer encodes, ``ballast.extender.encode``), so tests and benchmarks call them directly and
the routes stay thin.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from ballast.extender.metrics import ExtenderMetrics
from ballast.extender.numa.check import NumaCheck
from ballast.extender.numa.community_check import CommunityCheck
from ballast.extender.numa.crane import NodeTopology, ZoneUsage
from ballast.extender.remembered import REMEMBER_CAP, REMEMBER_SECONDS, RememberedNodes
from ballast.extender.shadow import ShadowBook
from ballast.extender.wire import ExtenderArgs, Scores, filter_result, require_pod
from ballast.model.bad_request import BadRequest
from ballast.model.estimation import Estimate, estimate_usage
from ballast.model.ledger import Ledger
from ballast.model.load import Rejection, check_node, projected_load, relative_scores, score_node
from ballast.model.nodestate import NodeState, parse_node
from ballast.model.podinfo import PodDemand, PodRecord, pod_info, read_pod
from ballast.model.policy import Policy
from ballast.model.policy_store import PolicyStore
from ballast.model.pools import MODES
from ballast.model.verdicts import VerdictBoard, filter_names, with_pod

log = logging.getLogger("ballast.extender")


class NodeSource(Protocol):
    """Everything the verbs ask of the cluster: the watch-driven cache
    (``ballast.extender.cache.ClusterCache``)."""

    node_listeners: list[Callable[[str, dict[str, Any] | None], None]]
    """Told of every node event (``None`` after a relist), so the verdict board follows the watch."""

    def node(self, name: str) -> NodeState | None: ...

    def node_names(self) -> Iterable[str]: ...

    def pod(self, uid: str) -> PodDemand | None: ...

    def topology(self, node: str) -> NodeTopology | None: ...

    def zone_usage(self, node: str) -> ZoneUsage: ...

    def pins_cpus(self) -> bool:
        """Whether any node's NRT says Ballast pins CPUs there; when none does, NUMA work is skipped."""
        ...


SHADOW = MODES[1]
UNKNOWN_LOG_SECONDS = 10.0
"""Unknown node names are logged at most this often (with a count), never once per name."""


class Extender:
    def __init__(
        self,
        store: PolicyStore,
        metrics: ExtenderMetrics,
        source: NodeSource | None,
        ledger: Ledger,
        clock: Callable[[], float] = time.time,
        community: CommunityCheck | None = None,
    ) -> None:
        """``community`` makes the NUMA checks on nodes with a community NRT (v1alpha2) too."""
        self.store = store
        self.metrics = metrics
        self.source = source
        self.ledger = ledger
        self.clock = clock
        self._unknown_lock = threading.Lock()
        self._unknown_since = 0
        self._unknown_logged_at = -UNKNOWN_LOG_SECONDS
        self._parsed = RememberedNodes(REMEMBER_CAP, REMEMBER_SECONDS, clock)
        """Whole-node mode: the last parse of each node by name, reused while its resourceVersion holds.
        Bounded in time and count, so a standalone extender (and its /nodes) does not keep every node
        ever sent."""
        self._warned_names_only = False
        self._seen = {v: metrics.nodes_seen.labels(v) for v in ("filter", "prioritize", "preempt")}
        self._rejected_children: dict[str, Any] = {}
        self.numa = NumaCheck(
            store, source, lambda count: self._rejected("numa").inc(count), clock, community
        )
        """The NUMA side of filter and prioritize; remembers what filter learnt for bind."""
        self._answering = threading.local()
        """Set while ``answering`` runs a verb in this thread: the board defers what the verb changes."""
        self.request_board = self._new_board(self._parsed.get)
        """Standing verdicts of nodes seen in whole-node requests (updated when a resourceVersion changes)."""
        self.board: VerdictBoard | None = None
        """Standing verdicts of the cache's nodes (names mode); none without a cache."""
        self.shadow = ShadowBook(
            lambda agreed: metrics.shadow_choices.labels("true" if agreed else "false").inc(),
            metrics.shadow_load_excess.observe,
            clock,
        )
        """Shadow mode: Ballast's favourites per pod, compared with the scheduler's node once it is bound."""
        if source is not None:
            board = self.board = self._new_board(source.node, deferrable=True)
            source.node_listeners.append(self._node_changed)
            board.rebuild(source.node_names(), clock())
            self.shadow.load_of = self._standing_load
            bound = getattr(source, "bound_listeners", None)
            if bound is not None:
                bound.append(self.shadow.placed)
        self._would_reject_children: dict[str, Any] = {}
        self._mode = store.current.mode
        self._mode_set(None)
        store.on_change(self._policy_changed)

    def _mode_set(self, previous: str | None) -> None:
        mode = self.store.current.mode
        self.metrics.shadow_mode.set(1 if mode == SHADOW else 0)
        if mode != previous:
            if mode == SHADOW:
                log.warning(
                    "policy mode: shadow: filter passes every node, prioritize scores every node the same "
                    "and bind never refuses for load; what Ballast would have done is only counted "
                    "(NUMA placement stays enforced)"
                )
            else:
                log.info("policy mode: enforce: Ballast's load rules decide")

    def _standing_load(self, node: str, cpu_milli: int, memory_bytes: int) -> float | None:
        """The node's standing projected load with a pod of this size added (the board's projection)."""
        if self.board is None:
            return None
        self.board.refresh(self.clock())
        entry = self.board.projection.get(node)
        return None if entry is None else with_pod(entry, cpu_milli, memory_bytes)

    def _new_board(self, lookup: Callable[[str], NodeState | None], deferrable: bool = False) -> VerdictBoard:
        """A verdict board over ``lookup``'s nodes that follows the ledger's estimates; a ``deferrable``
        one takes in what a verb run by ``answering`` changes only at ``settle``."""
        board = VerdictBoard(lookup, lambda: self.store.current, self.ledger)
        if deferrable:
            self.ledger.listeners.append(
                lambda nodes: (
                    board.defer(nodes)
                    if getattr(self._answering, "on", False)
                    else board.update(nodes, self.clock(), estimates_only=True)
                )
            )
        else:
            self.ledger.listeners.append(lambda nodes: board.update(nodes, self.clock(), estimates_only=True))
        return board

    def answering(self, verb: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a verb whose changes to the names-mode board (its hold) wait for ``settle``: the HTTP layer
        settles once the answer is sent, so recomputing the held node is not on kube-scheduler's wait.
        Every read of the board settles first, so nothing reads it stale."""
        self._answering.on = True
        try:
            return verb(*args, **kwargs)
        finally:
            self._answering.on = False

    def settle(self) -> None:
        if self.board is not None:
            self.board.settle(self.clock())

    def _node_changed(self, event_type: str, obj: dict[str, Any] | None) -> None:
        assert self.board is not None and self.source is not None
        if obj is None:  # a relist replaced everything
            self.board.rebuild(self.source.node_names(), self.clock())
        else:
            self.board.update([obj["metadata"]["name"]], self.clock())

    def _policy_changed(self, policy: Policy) -> None:
        previous, self._mode = self._mode, policy.mode
        self._mode_set(previous)
        self._parsed.clear()
        self._parsed.drain_forgotten()  # the rebuild below drops them all from the board
        self.ledger.set_policy(policy)
        self.request_board.rebuild((), self.clock())
        if self.board is not None and self.source is not None:
            self.board.rebuild(self.source.node_names(), self.clock())

    # -- node lookup --------------------------------------------------------------------------------

    def _from_object(self, node: dict[str, Any], policy: Policy) -> NodeState:
        """Parse a whole Node once per resourceVersion, so full-node requests do not re-parse."""
        meta = node["metadata"]
        rv = meta.get("resourceVersion")
        load = self._parsed.get(meta["name"])
        if load is None or load.resource_version != rv or not rv:
            load = parse_node(node, policy, self.clock())
            if load.bad or load.ahead:
                self.metrics.count_bad(load)
            self._parsed[load.name] = load
            # Nodes the bound pushed out leave the board too (its lookup no longer finds them).
            self.request_board.update((*self._parsed.drain_forgotten(), load.name), self.clock())
        return load

    def peek_object(self, node: dict[str, Any], policy: Policy) -> NodeState:
        """``_from_object`` without remembering anything: what /explain reads (it must not write)."""
        meta = node["metadata"]
        rv = meta.get("resourceVersion")
        load = self._parsed.get(meta["name"])
        if load is None or load.resource_version != rv or not rv:
            load = parse_node(node, policy, self.clock())
        return load

    def _from_name(self, name: str) -> NodeState | None:
        if self.source is None:
            return None
        load = self.source.node(name)
        if load is None:
            self.metrics.unknown_nodes.inc()
            self._unknown_report(name)
        return load

    def _unknown_report(self, name: str) -> None:
        """Log unknown names at most once per ``UNKNOWN_LOG_SECONDS``, with their count: one request of
        10^6 unknown names once wrote 10^6 INFO lines (127 MB). The metric counts every one."""
        now = time.monotonic()
        with self._unknown_lock:
            self._unknown_since += 1
            if now - self._unknown_logged_at < UNKNOWN_LOG_SECONDS:
                return
            count, self._unknown_since, self._unknown_logged_at = self._unknown_since, 0, now
        log.info(
            "%d node name(s) not in the cache since the last report (e.g. %s): no information, they pass "
            "and score 0 (ballast_extender_unknown_nodes_total counts them)",
            count,
            name[:253],
        )

    def known_node(self, name: str) -> NodeState | None:
        """A node from the cache, else from a recent whole-node request that carried it (for /nodes only:
        filter in names mode without a cache does not use these, so neither does /explain)."""
        if self.source is not None:
            return self.source.node(name)
        return self._parsed.get(name)

    def known_names(self) -> list[str]:
        if self.source is not None:
            return sorted(self.source.node_names())
        return sorted(self._parsed)

    def _names_only_without_cache(self) -> None:
        self.metrics.names_only.inc()
        if not self._warned_names_only:
            self._warned_names_only = True
            log.warning(
                "kube-scheduler sent only NodeNames (nodeCacheCapable: true) but this extender has no "
                "node cache (start it with --kubeconfig or in a cluster): every node passes unscored"
            )

    def incoming(self, pod: PodDemand, now: float) -> Estimate | None:
        return None if pod.daemonset else self.ledger.incoming(pod, now)

    def extra(self, load: NodeState, now: float, incoming: Estimate | None, skip: str = ""):
        return self.ledger.extra(load, now, incoming, skip=skip or None)

    # -- verbs --------------------------------------------------------------------------------------

    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        """Load verdicts, then the NUMA fit. In shadow mode the load verdicts are counted
        (``shadow_would_reject``) and every node passes them; the NUMA fit still applies."""
        policy = self.store.current
        now = self.clock()
        record = read_pod.record(args.pod)
        pod = record.info
        incoming = self.incoming(pod, now)
        shadow = policy.mode == SHADOW
        failed: dict[str, str] = {}
        if args.nodes is not None:
            self._seen["filter"].inc(len(args.nodes))
            loads = [self._from_object(node, policy) for node in args.nodes]
            names = [load.name for load in loads]
            in_request = {load.name: load for load in loads}
            if pod.daemonset:
                passing_nodes = list(args.nodes)
            else:
                passed, failed = self._filter_from_board(
                    self.request_board, in_request.get, pod, names, incoming, policy, now
                )
                if shadow:
                    passed, failed = names, {}
                if len(passed) == len(names):
                    passing_nodes = list(args.nodes)
                else:
                    keep = set(passed)
                    passing_nodes = [n for n, name in zip(args.nodes, names, strict=True) if name in keep]
            passing_names = [n["metadata"]["name"] for n in passing_nodes]
            numa_failed = self._numa_filter(record, passing_names, failed)
            if numa_failed:
                passing_nodes = [n for n in passing_nodes if n["metadata"]["name"] not in numa_failed]
                passing_names = [n for n in passing_names if n not in numa_failed]
            self._hold_single(pod, passing_names, now)
            return filter_result(nodes=passing_nodes, failed=failed)
        names = args.node_names or []
        self._seen["filter"].inc(len(names))
        if self.board is None:
            self._names_only_without_cache()
            passing = list(names)
        elif pod.daemonset:
            passing = list(names)
        else:
            passing, failed = self._filter_from_board(
                self.board, self._from_name, pod, names, incoming, policy, now
            )
            if shadow:
                passing, failed = list(names), {}
            numa_failed = self._numa_filter(record, passing, failed)
            if numa_failed:
                passing = [n for n in passing if n not in numa_failed]
            self._hold_single(pod, passing, now)
        return filter_result(names=passing, failed=failed)

    def _numa_filter(self, record: PodRecord, passing: list[str], failed: dict[str, str]) -> set[str]:
        """The nodes of ``passing`` the pod's NUMA need rejects (their reasons into ``failed``)."""
        need = self.numa.need(record)
        return self.numa.filter(need, passing, failed) if need is not None else set()

    def _filter_from_board(
        self,
        board: VerdictBoard,
        lookup: Callable[[str], NodeState | None],
        pod: PodDemand,
        names: list[str],
        incoming: Estimate | None,
        policy: Policy,
        now: float,
    ) -> tuple[list[str], dict[str, str]]:
        """Names-mode filter from the verdict board (``ballast.model.verdicts.filter_names``), against the
        prod limits for a prod pod. Rejections count as rejected, or in shadow mode as would-reject."""
        prod = policy.is_prod(pod.priority)

        def exact_check(name: str) -> Rejection | None:
            load = lookup(name)
            if load is None:
                return None
            return check_node(load, policy, now, self.extra(load, now, incoming), prod)

        cpu, mem = _size(incoming)
        passing, failed, rejected_by = filter_names(
            board, names, cpu, mem, now, self._own_node(pod), exact_check, prod
        )
        count = self._would_reject if policy.mode == SHADOW else self._rejected
        for metric, n in rejected_by.items():
            count(metric).inc(n)
        return passing, failed

    def _would_reject(self, metric: str):
        child = self._would_reject_children.get(metric)
        if child is None:
            child = self._would_reject_children[metric] = self.metrics.shadow_would_reject.labels(metric)
        return child

    def _rejected(self, metric: str):
        child = self._rejected_children.get(metric)
        if child is None:
            child = self._rejected_children[metric] = self.metrics.rejected.labels(metric)
        return child

    def _own_node(self, pod: PodDemand) -> str | None:
        """The node holding this pod's own estimate (kube-scheduler asks again after a failed attempt)."""
        own = self.ledger.known(pod.uid) if pod.uid else None
        return own.node if own is not None else None

    def _scored_exactly(self, pod: PodDemand, names: list[str], entries: Sequence[object | None]) -> set[str]:
        """The candidates prioritize scores by the definition, not from the board: the node holding this
        pod's own estimate (its hold must not count against it) and the names whose board ``entries``
        are ``None`` (the board lacks them; pass no entries when it has them all)."""
        exact = {n for n, e in zip(names, entries, strict=True) if e is None} if entries else set()
        if (own := self._own_node(pod)) is not None:
            exact.add(own)
        return exact

    def _hold_single(self, pod: PodDemand, passing: list[str], now: float) -> None:
        """With one feasible node kube-scheduler skips prioritize: hold the estimate here instead."""
        if len(passing) == 1:
            self._hold_best(pod, passing, [0], now)

    def prioritize(self, args: ExtenderArgs) -> Scores:
        """Scores for kube-scheduler, in the order of the request's candidates."""
        policy = self.store.current
        record = read_pod.record(args.pod)
        if policy.mode == SHADOW:
            return self._shadow_prioritize(args, record, policy)
        return self._prioritize(args, record, policy)

    def _shadow_prioritize(self, args: ExtenderArgs, record: PodRecord, policy: Policy) -> Scores:
        """Work out the real scores, note Ballast's favourites for the pod (``ballast.extender.shadow``), and
        answer every candidate the same score, so kube-scheduler's own plugins alone decide."""
        real = self._prioritize(args, record, policy)
        pod = record.info
        if real.hosts and not pod.daemonset:
            cpu, mem = _size(self.incoming(pod, self.clock()))
            self.shadow.note(pod.uid, real.hosts, real.scores, cpu, mem)
        return Scores(real.hosts, [0] * len(real.hosts))

    def _prioritize(self, args: ExtenderArgs, record: PodRecord, policy: Policy) -> Scores:
        now = self.clock()
        if args.nodes is not None:
            self._seen["prioritize"].inc(len(args.nodes))
            in_request = {load.name: load for load in (self._from_object(n, policy) for n in args.nodes)}
            names = [n["metadata"]["name"] for n in args.nodes]
            return self._prioritize_from_board(self.request_board, in_request.get, record, names, policy, now)
        names = args.node_names or []
        self._seen["prioritize"].inc(len(names))
        if self.board is None:
            self._names_only_without_cache()
            return Scores(list(names), [0] * len(names))
        return self._prioritize_from_board(self.board, self._from_name, record, names, policy, now)

    def _hold_best(self, pod: PodDemand, names: list[str], scores: list[int], now: float) -> None:
        """kube-scheduler binds asynchronously: hold this pod's estimate on the node it will most likely
        get, the best-scoring candidate, so the next pod's filter and prioritize see it there before the
        bind arrives. kube-scheduler breaks a tie between equal scores by its own plugins, whose
        request-based scores favour the node with fewer pods: among a few tied candidates the hold goes
        to the one holding the fewest of Ballast's estimates (the first of those)."""
        if not names or pod.daemonset or self.store.current.mode == SHADOW:
            return  # in shadow mode the scheduler's own choice is recorded at bind (or by the pod watch)
        top = max(scores)
        best = scores.index(top)
        if 1 < scores.count(top) <= _FEW_TIED:
            on_node = self.ledger.on_node
            tied = [i for i, s in enumerate(scores) if s == top]
            best = min(tied, key=lambda i: sum(e.uid != pod.uid for e in on_node(names[i])))
        self.ledger.hold(pod, names[best], now)

    def _prioritize_from_board(
        self,
        board: VerdictBoard,
        lookup: Callable[[str], NodeState | None],
        record: PodRecord,
        names: list[str],
        policy: Policy,
        now: float,
    ) -> Scores:
        """crane's scores from the board: every candidate's standing score, but for the few scored exactly
        (``_scored_exactly``), then the NUMA score folded in for a pod that needs zones."""
        board.refresh(now)
        if policy.scoring == "relative":
            return self._relative_from_board(board, lookup, record, names, policy, now)
        pod = record.info
        values = list(map(board.scored.get, names))  # C-level; None for names the board lacks
        exact = self._scored_exactly(pod, names, values if None in values else ())
        for name in exact:
            score = self._exact_score(lookup, name, pod, policy, now)
            for i in _positions(names, name):
                values[i] = score
        scores: list[int] = values  # type: ignore[assignment]  # every None was a name scored exactly
        need = self.numa.need(record)
        if need is not None:
            self.numa.scores(need, names, scores)
        self._hold_best(pod, names, scores, now)
        return Scores(names, scores)

    def _relative_from_board(
        self,
        board: VerdictBoard,
        lookup: Callable[[str], NodeState | None],
        record: PodRecord,
        names: list[str],
        policy: Policy,
        now: float,
    ) -> Scores:
        """Relative scores: each candidate's standing projected load from the board plus this pod's
        estimate (``VerdictBoard.loads_for``), ranked over the candidates. Exactly computed are only the node
        holding this pod's own estimate and names the board lacks."""
        pod = record.info
        incoming = self.incoming(pod, now)
        cpu, mem = _size(incoming)
        # C-level; None for a node without information and for a name the board lacks
        loads = list(map(board.loads_for(cpu, mem).get, names))
        entries = list(map(board.projection.get, names)) if None in loads else ()
        exact = self._scored_exactly(pod, names, entries if None in entries else ())
        for name in exact:
            value = self._exact_load(lookup, name, pod, policy, now, incoming)
            for i in _positions(names, name):
                loads[i] = value
        scores = relative_scores(loads)
        need = self.numa.need(record)
        if need is not None:
            self.numa.scores(need, names, scores)
        self._hold_best(pod, names, scores, now)
        return Scores(names, scores)

    def _exact_load(
        self,
        lookup: Callable[[str], NodeState | None],
        name: str,
        pod: PodDemand,
        policy: Policy,
        now: float,
        incoming: Estimate | None,
    ) -> float | None:
        """The projected load after this pod by the definition (``projected_load``), counting the pod's
        estimate once (its own hold is skipped); ``None`` for a node Ballast does not know."""
        load = lookup(name)
        if load is None:
            return None
        return projected_load(load, policy, now, self.extra(load, now, None, skip=pod.uid), _size(incoming))

    def _exact_score(
        self, lookup: Callable[[str], NodeState | None], name: str, pod: PodDemand, policy: Policy, now: float
    ) -> int:
        """The score by the definition (``score_node``), not counting the pod's own held estimate; 0 for a
        node Ballast does not know (no information)."""
        load = lookup(name)
        if load is None:
            return 0
        return score_node(load, policy, now, self.extra(load, now, None, skip=pod.uid)).score

    def preempt(self, body: dict[str, Any]) -> dict[str, Any]:
        """Keep candidate nodes where evicting the victims brings the node under every limit (every
        candidate in shadow mode, where the load rules only count)."""
        policy = self.store.current
        now = self.clock()
        folded = {k.lower(): v for k, v in body.items()}
        pod = pod_info(require_pod(folded))
        incoming = self.incoming(pod, now)
        full = folded.get("nodenametovictims")
        meta = folded.get("nodenametometavictims")
        if full is not None and not isinstance(full, dict):
            raise BadRequest("NodeNameToVictims", "expected an object of node name -> Victims")
        if meta is not None and not isinstance(meta, dict):
            raise BadRequest("NodeNameToMetaVictims", "expected an object of node name -> MetaVictims")
        candidates = full if full is not None else (meta or {})
        field = "NodeNameToVictims" if full is not None else "NodeNameToMetaVictims"
        self._seen["preempt"].inc(len(candidates))
        out: dict[str, Any] = {}
        for node, victims in candidates.items():
            if not isinstance(victims, dict):
                raise BadRequest(f"{field}.{node}", "expected an object with Pods and NumPDBViolations")
            pods = victims.get("Pods", victims.get("pods")) or []
            if not isinstance(pods, list):
                raise BadRequest(f"{field}.{node}.Pods", "expected a list")
            uids, freed = self._victims(pods, full is not None, f"{field}.{node}.Pods", policy)
            violations = victims.get("NumPDBViolations", victims.get("numPDBViolations", 0))
            if isinstance(violations, bool) or not isinstance(violations, int):
                raise BadRequest(f"{field}.{node}.NumPDBViolations", "expected an integer")
            load = self.known_node(node)
            if load is not None and not pod.daemonset and policy.mode != SHADOW:
                extra = self.ledger.extra(load, now, incoming, minus=freed)
                rejection = check_node(load, policy, now, extra, policy.is_prod(pod.priority))
                if rejection is not None:
                    log.info(
                        "preempt: dropping %s, still overloaded after evicting victims: %s",
                        node,
                        rejection.reason,
                    )
                    continue
            out[node] = {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": violations}
        return {"NodeNameToMetaVictims": out}

    def _victims(
        self, pods: list[Any], full: bool, field: str, policy: Policy
    ) -> tuple[list[str], dict[str, int]]:
        """Victim UIDs and the usage their eviction frees, estimated like a newly placed pod."""
        uids: list[str] = []
        cpu = mem = 0
        for i, p in enumerate(pods):
            if not isinstance(p, dict):
                raise BadRequest(f"{field}[{i}]", "expected an object")
            if full:
                try:
                    info: PodDemand | None = pod_info(p)
                except BadRequest as exc:
                    raise BadRequest(f"{field}[{i}].{exc.field.removeprefix('Pod.')}", exc.reason) from exc
                uid = info.uid if info else ""
            else:
                uid = p.get("UID", p.get("uid"))
                if not isinstance(uid, str):
                    raise BadRequest(f"{field}[{i}].UID", "required: a string")
                info = self.source.pod(uid) if self.source is not None else None
            uids.append(uid)
            if info is not None:
                c, m = estimate_usage(info, policy.estimation)
                cpu += c
                mem += m
        return uids, {"cpu": cpu, "memory": mem}


_FEW_TIED = 8
"""Up to this many candidates tied at the top score, the hold weighs which one kube-scheduler will pick;
more (a cluster of equal nodes, or none measured) is no real preference: the first one."""


def _positions(items: list[str], value: str) -> Iterator[int]:
    """Every index of ``value`` in ``items``, found at C speed (``list.index``)."""
    i = -1
    while True:
        try:
            i = items.index(value, i + 1)
        except ValueError:
            return
        yield i


def _size(incoming: Estimate | None) -> tuple[int, int]:
    """The incoming pod's estimate (millicores, bytes); nothing without one."""
    return (incoming.cpu_milli, incoming.memory_bytes) if incoming is not None else (0, 0)
