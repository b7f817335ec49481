"""Leader election on a ``coordination.k8s.io/v1`` Lease, client-go's algorithm in miniature.

- A candidate reads the Lease; it takes it when nobody holds it, or when the holder's record has not
  changed for ``leaseDurationSeconds`` *as observed on the candidate's own monotonic clock* (client-go's
  rule: no comparison of wall clocks across machines).
- Every write is an update with the Lease's ``resourceVersion`` (optimistic concurrency): of two
  candidates racing for the same record, the API server lets exactly one through (409 for the other).
- The leader renews every ``retry_period``, from its cached Lease; a renewal that conflicts (409: someone
  else wrote the Lease) reads it at once, so a Lease taken by another write ends leadership at that
  attempt, not at the next one. It may act (write annotations, evict) only until
  ``renew_deadline`` after it *sent* its last successful renewal, which is shorter than the lease
  duration others wait, so two replicas never write at the same time even when the leader stalls.
- ``release()`` (on SIGTERM) first stops writing, then hands the Lease back (empty holder, duration 1s)
  so the other replica takes over at its next retry instead of waiting out the lease.
- ``confirm()`` reads the Lease back from the API server immediately before an irreversible act (an
  eviction): true only when the Lease still names this replica *and* the renew deadline has not passed
  (checked after the read, so a slow read cannot stretch it). A Lease taken by any other write (another
  replica, an operator's edit) stops this replica at once instead of at its next renewal.
- ``term`` counts the times this replica took the Lease from someone else (or from nobody): a new term
  is when a leader must first learn what its predecessor did.

Defaults are crane's (and kube-controller-manager's): 15s lease, 10s renew deadline, 2s retry period.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ballast.kube.client import ApiError, Kube, connect, path_for
from ballast.program.flags import duration

__all__ = ["DEFAULT_NAMESPACE", "LeaderElector", "default_identity", "lease_namespace", "micro_time"]

log = logging.getLogger("ballast.leader")

LEASE_API = "coordination.k8s.io/v1"
JITTER = 1.2
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "ballast-system"


def lease_namespace(flag: str | None, namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """``--lease-namespace``, else the pod's namespace from its service account, else ballast-system."""
    if flag:
        return flag
    with contextlib.suppress(OSError):
        ns = namespace_file.read_text().strip()
        if ns:
            return ns
    return DEFAULT_NAMESPACE


def micro_time(when: float) -> str:
    """Kubernetes ``MicroTime``: RFC 3339 UTC with microseconds."""
    return datetime.fromtimestamp(when, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """client-go's convention: the host name (the pod name in a cluster) plus a unique suffix."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def _record(lease: dict[str, Any]) -> tuple[Any, ...]:
    spec = lease.get("spec") or {}
    return (
        spec.get("holderIdentity"),
        spec.get("renewTime"),
        spec.get("acquireTime"),
        spec.get("leaseDurationSeconds"),
        spec.get("leaseTransitions"),
    )


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str = "ballast-annotator",
        identity: str | None = None,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        on_change: Callable[[str], None] | None = None,
    ) -> None:
        if not lease_duration > renew_deadline:
            raise ValueError("the lease duration must be longer than the renew deadline")
        if not renew_deadline > JITTER * retry_period:
            raise ValueError(f"the renew deadline must be longer than {JITTER} x the retry period")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self.monotonic = monotonic
        self.on_change = on_change
        self.path = path_for(LEASE_API, "leases", namespace, name)
        self._lock = threading.Lock()
        self._lease: dict[str, Any] | None = None
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = float("-inf")
        self._valid_until = float("-inf")
        self._leading = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error = ""
        self.term = 0

    # ---- state

    def is_leader(self) -> bool:
        """May this replica write now? True only inside the renew deadline of its last renewal."""
        return self.monotonic() < self._valid_until

    def confirm(self) -> bool:
        """Leadership checked against the API server now (one GET of the Lease): the Lease names this
        replica and the renew deadline of its last renewal has not passed. Any failure says no."""
        if not self.is_leader():
            return False
        try:
            lease = self.kube.get(self.path)
        except ApiError as exc:
            self.last_error = str(exc)
            log.warning("lease %s/%s: could not confirm leadership: %s", self.namespace, self.name, exc)
            return False
        holder = (lease.get("spec") or {}).get("holderIdentity") if isinstance(lease, dict) else None
        if holder != self.identity:
            self._valid_until = float("-inf")  # taken by another write: stop at once
            log.warning("lease %s/%s is held by %s, not by this replica: not acting",
                        self.namespace, self.name, holder)  # fmt: skip
            return False
        return self.is_leader()

    @property
    def holder(self) -> str | None:
        """The holder in the last Lease seen (``None`` before the first read)."""
        return None if self._lease is None else (self._lease.get("spec") or {}).get("holderIdentity")

    def _observe(self, lease: dict[str, Any]) -> None:
        record = _record(lease)
        if record != self._observed:
            self._observed = record
            self._observed_at = self.monotonic()
        self._lease = lease

    def _expired(self, lease: dict[str, Any]) -> bool:
        duration = (lease.get("spec") or {}).get("leaseDurationSeconds") or self.lease_duration
        return self._observed_at + float(duration) <= self.monotonic()

    # ---- one attempt

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this replica holds the Lease afterwards."""
        with self._lock:
            sent = self.monotonic()
            try:
                ok = self._attempt()
            except ApiError as exc:
                self.last_error = str(exc)
                log.debug("lease %s/%s: %s", self.namespace, self.name, exc)
                ok = False
            if ok:
                self._valid_until = sent + self.renew_deadline
            return ok

    def _attempt(self, again: bool = True) -> bool:
        now = self.clock()
        lease = self._lease if self._holding_cached() else None
        if lease is None:
            try:
                lease = self.kube.get(self.path)
            except ApiError as exc:
                if exc.code != 404:
                    raise
                return self._create(now)
            self._observe(lease)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity and not self._expired(lease):
            self._valid_until = float("-inf")  # someone else leads: stop writing at once
            return False
        mine = holder == self.identity
        new_spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": round(self.lease_duration),
            "acquireTime": spec.get("acquireTime") if mine and spec.get("acquireTime") else micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if mine else 1),
        }
        body = {
            "apiVersion": LEASE_API,
            "kind": "Lease",
            "metadata": {**self._metadata(lease), "resourceVersion": lease["metadata"]["resourceVersion"]},
            "spec": new_spec,
        }
        try:
            updated = self.kube.replace(self.path, body)
        except ApiError as exc:
            self._lease = None  # stale or raced: read it again
            if exc.code == 409:
                # Someone else wrote the Lease since this replica's last write. Read it now rather than
                # at the next retry: a Lease taken by another write ends leadership at this attempt.
                return self._attempt(again=False) if again and mine else False
            raise
        self._observe(updated)
        if not mine:
            self.term += 1
        return True

    def _holding_cached(self) -> bool:
        # While leading, renew straight from the cached Lease (its resourceVersion guards the update).
        return self._lease is not None and self.holder == self.identity and self.is_leader()

    def _metadata(self, lease: dict[str, Any] | None = None) -> dict[str, Any]:
        meta = dict((lease or {}).get("metadata") or {})
        out = {"name": self.name, "namespace": self.namespace}
        for key in ("labels", "annotations"):
            if meta.get(key):
                out[key] = meta[key]
        return out

    def _create(self, now: float) -> bool:
        body = {
            "apiVersion": LEASE_API,
            "kind": "Lease",
            "metadata": self._metadata(),
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": round(self.lease_duration),
                "acquireTime": micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": 0,
            },
        }
        try:
            created = self.kube.create(path_for(LEASE_API, "leases", self.namespace), body)
        except ApiError as exc:
            if exc.code == 409:  # another candidate created it first
                return False
            raise
        self._observe(created)
        self.term += 1
        return True

    def release(self) -> bool:
        """Stop writing, then hand the Lease back if this replica holds it."""
        with self._lock:
            self._valid_until = float("-inf")
            if self._lease is None or self.holder != self.identity:
                return False
            now = self.clock()
            spec = self._lease.get("spec") or {}
            body = {
                "apiVersion": LEASE_API,
                "kind": "Lease",
                "metadata": {
                    **self._metadata(self._lease),
                    "resourceVersion": self._lease["metadata"]["resourceVersion"],
                },
                "spec": {
                    "holderIdentity": "",
                    "leaseDurationSeconds": 1,
                    "acquireTime": micro_time(now),
                    "renewTime": micro_time(now),
                    "leaseTransitions": int(spec.get("leaseTransitions") or 0),
                },
            }
            try:
                self._lease = self.kube.replace(self.path, body)
            except ApiError as exc:
                # 409: someone else took it after our renew deadline passed, which is fine.
                level = logging.DEBUG if exc.code == 409 else logging.WARNING
                log.log(level, "could not release lease %s/%s: %s", self.namespace, self.name, exc)
                self._lease = None
                return False
            log.info("released lease %s/%s", self.namespace, self.name)
            return True

    # ---- the loop

    def _set_leading(self, leading: bool, event: str) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        if leading:
            log.info("acquired lease %s/%s as %s: leading", self.namespace, self.name, self.identity)
        elif event == "lost":
            log.warning(
                "lost lease %s/%s (no renewal within %gs; last error: %s)",
                self.namespace,
                self.name,
                self.renew_deadline,
                self.last_error or "none",
            )
        if self.on_change is not None:
            self.on_change(event)

    def run(self, stop: threading.Event | None = None) -> None:
        """Acquire, renew, re-acquire after a loss, until ``stop``; then release."""
        stop = stop or self._stop
        log.info(
            "waiting for lease %s/%s as %s (lease %gs, renew deadline %gs, retry %gs)",
            self.namespace,
            self.name,
            self.identity,
            self.lease_duration,
            self.renew_deadline,
            self.retry_period,
        )
        try:
            while not stop.is_set():
                self.try_acquire_or_renew()
                if self.is_leader():
                    self._set_leading(True, "acquired")
                else:
                    self._set_leading(False, "lost")
                delay = self.retry_period if self._leading else self.retry_period * random.uniform(1, JITTER)
                stop.wait(delay)
        finally:
            if self.release() or self._leading:
                self._set_leading(False, "released")

    def wait_leading(self, timeout: float, stop: threading.Event | None = None) -> bool:
        """Try until this replica leads or ``timeout`` passes (``--once --leader-elect``)."""
        deadline = self.monotonic() + timeout
        while True:
            if self.try_acquire_or_renew():
                self._set_leading(True, "acquired")
                return True
            if self.monotonic() >= deadline or (stop is not None and stop.is_set()):
                return False
            time.sleep(min(self.retry_period, max(0.0, deadline - self.monotonic())))

    def start(self) -> LeaderElector:
        self._thread = threading.Thread(target=self.run, args=(self._stop,), name="leader", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)


def add_leader_flags(parser: argparse.ArgumentParser, lease_name: str, acts: str, acting: str) -> None:
    """The leader-election flags of every program that holds a Lease: the same names, defaults and
    meaning, so an operator tunes the annotator and the rebalancer alike. ``acts``/``acting`` name what
    only the leader does (``writes``/``writing``)."""
    le = parser.add_argument_group("leader election (coordination.k8s.io/v1 Lease)")
    le.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"hold a Lease so that only one replica {acts} (default: on, off with --once)",
    )
    le.add_argument("--lease-name", default=lease_name, metavar="NAME", help="name of the Lease")
    le.add_argument(
        "--lease-namespace",
        metavar="NAMESPACE",
        help="namespace of the Lease (default: the pod's own namespace from its service account, else "
        f"{DEFAULT_NAMESPACE})",
    )
    le.add_argument(
        "--lease-duration",
        type=duration,
        default="15s",
        metavar="DURATION",
        help="how long others wait after the holder's last renewal before taking over",
    )
    le.add_argument(
        "--renew-deadline",
        type=duration,
        default="10s",
        metavar="DURATION",
        help=f"the leader stops {acting} when it could not renew for this long",
    )
    le.add_argument(
        "--retry-period",
        type=duration,
        default="2s",
        metavar="DURATION",
        help="how often candidates try to acquire and the leader renews",
    )
    le.add_argument(
        "--identity",
        metavar="ID",
        help="this replica's holder identity (default: host name plus a random suffix)",
    )


def leader_flags_problem(args: argparse.Namespace) -> str | None:
    """Why the flags of ``add_leader_flags`` cannot make an elector (checked at start-up, exit 2), or
    None: the same rule ``LeaderElector`` enforces, worded for the command line."""
    if args.lease_duration > args.renew_deadline > JITTER * args.retry_period:
        return None
    return (
        f"leader election needs --lease-duration > --renew-deadline > {JITTER} x --retry-period "
        f"(got {args.lease_duration:g}s, {args.renew_deadline:g}s, {args.retry_period:g}s)"
    )


class LeaderFlagsError(ValueError):
    """The flags of ``add_leader_flags`` cannot make an elector (``leader_flags_problem`` says why)."""


def connect_elected(args: argparse.Namespace, program: str) -> tuple[str, Kube]:
    """``(identity, client)`` of a program elected by a Lease, set up one way: the leader flags checked, the
    identity from ``--identity`` (else the host's, ``default_identity``), and the client of ``connect``
    (``--kubeconfig``, ``--api-timeout``) named ``program (identity)`` in the User-Agent, so API audit logs
    (and tests) tell the replicas apart. ``program`` is e.g. ``ballast-rebalancer/0.1.0``. Raises
    ``LeaderFlagsError`` or ``ballast.kube.client.KubeConfigError``, both configuration problems (exit status
    2)."""
    problem = leader_flags_problem(args)
    if problem is not None:
        raise LeaderFlagsError(problem)
    identity = args.identity or default_identity()
    return identity, connect(args.kubeconfig, f"{program} ({identity})", args.api_timeout)


def elector_from_args(
    args: argparse.Namespace, kube: Kube, identity: str, leader: Any, transitions: Any
) -> LeaderElector:
    """The ``LeaderElector`` the flags of ``add_leader_flags`` describe; ``leader`` (a gauge) and
    ``transitions`` (a counter labelled by event) follow its changes."""

    def changed(event: str) -> None:
        leader.set(1 if event == "acquired" else 0)
        transitions.labels(event).inc()

    return LeaderElector(
        kube,
        lease_namespace(args.lease_namespace),
        args.lease_name,
        identity,
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
        on_change=changed,
    )


def elect(
    args: argparse.Namespace,
    kube: Kube,
    identity: str,
    metrics: Any,
    program: str,
    logger: logging.Logger = log,
) -> LeaderElector | None:
    """The elector of a running (not ``--once``) program: on unless ``--no-leader-elect``. Without it the
    leader gauge of ``metrics`` says 1 at once and a warning says to run one replica of ``program``."""
    if args.leader_elect is False:
        metrics.leader.set(1)
        logger.warning("leader election is off: run exactly one %s replica", program)
        return None
    return elector_from_args(args, kube, identity, metrics.leader, metrics.lease_transitions)
