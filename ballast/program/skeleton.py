"""The one skeleton every ``ballast`` program runs on, as kube-scheduler's and the descheduler's commands
share one: options, then config, then run.

- **Options**: a program declares a ``Command``: its name, what ``--help`` says, and a function adding its
  own flags. ``Command.register`` makes the subcommand the same way for all (the help layout, the logging
  flags last, the handler that returns the exit code), and imports the program's run module only when the
  command runs, so ``--help`` never loads the API client.
- **Config**: the run function checks what the flags name before any API call, and a problem there is
  exit code 2 with a message saying what to fix (each program's ``run``).
- **Run**: the program's own watches and loop, with what every long-running program needs around them,
  here once: ``Signals`` (SIGTERM and SIGINT stop, SIGHUP reloads the policy), ``PolicyReload`` (SIGHUP or
  a changed file, a failure never ending the loop), ``Heartbeat`` (``/healthz`` fails when the loop stops
  turning), ``serve_health`` (``/healthz``, ``/readyz``, ``/metrics``) and ``watches_ready`` (``/readyz``
  while the watches have not listed or the policy was refused). Leader election is ``leader.elect``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from ballast.program.flags import HelpFormatter, add_common
from ballast.program.health import HealthServer, Probe, serving

__all__ = [
    "Command",
    "HealthFailed",
    "Heartbeat",
    "PolicyReload",
    "Refused",
    "Signals",
    "serve_health",
    "watches_ready",
]

log = logging.getLogger("ballast")


@dataclass(frozen=True)
class Command:
    """A program as the ``ballast`` command knows it. ``run`` is ``"module:function"``, imported when the
    command runs; the function takes the parsed flags and returns the exit code."""

    name: str
    help: str
    description: str
    flags: Callable[[argparse.ArgumentParser], None]
    run: str
    usage: str | None = None
    subcommands: Callable[[argparse.ArgumentParser], None] | None = None
    """Adds the command's own subcommands (``ballast agent topology``), after the logging flags."""

    def register(self, subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
        """Add the command to a ``ballast`` subparsers object: its flags, then the logging flags."""
        options: dict[str, Any] = {"usage": self.usage} if self.usage else {}
        parser = subparsers.add_parser(
            self.name,
            help=self.help,
            description=self.description,
            formatter_class=HelpFormatter,
            **options,
        )
        self.flags(parser)
        add_common(parser)
        parser.set_defaults(func=self.start)
        if self.subcommands is not None:
            self.subcommands(parser)
        return parser

    def start(self, args: argparse.Namespace) -> int:
        module, _, function = self.run.partition(":")
        return int(getattr(importlib.import_module(module), function)(args) or 0)


class Signals:
    """SIGTERM and SIGINT set ``stop`` (and ``wake``, so a loop sleeping on it sees them at once); SIGHUP
    sets ``hangup`` (a policy reload). The previous handlers come back when the block ends. Only the main
    thread may install handlers: a program embedded in another thread (tests) installs none and is stopped
    through ``stop``."""

    def __init__(
        self,
        stop: threading.Event,
        *,
        hangup: threading.Event | None = None,
        wake: threading.Event | None = None,
        then: str = "stepping down",
        logger: logging.Logger = log,
    ) -> None:
        self.stop = stop
        self.log = logger
        self.hangup = hangup
        self.wake = wake
        self.then = then
        self._previous: dict[int, Any] = {}

    def _stop(self, signum: int, _frame: FrameType | None) -> None:
        self.log.info("%s received; %s", signal.Signals(signum).name, self.then)
        self.stop.set()
        if self.wake is not None:
            self.wake.set()

    def _hangup(self, _signum: int, _frame: FrameType | None) -> None:
        assert self.hangup is not None
        self.hangup.set()

    def __enter__(self) -> Signals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._stop)
        if self.hangup is not None:
            self._previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._hangup)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()


class ReloadableStore(Protocol):
    """What ``PolicyReload`` needs of ``ballast.model.policy_store.PolicyStore``."""

    def reload(self, reason: str = ...) -> bool: ...

    def reload_if_changed(self) -> bool: ...


class PolicyReload:
    """The policy file read again on SIGHUP (``hangup``) or, every ``poll`` seconds, when it changed (``poll``
    0: only on SIGHUP; ``None``: at every ``check``, for a loop that ticks slower than a poll would). The
    store refuses a file that does not load and keeps the running policy; anything else that goes wrong is
    logged here and the running policy kept too: a reload never ends a program's loop."""

    def __init__(self, store: ReloadableStore, poll: float | None, hangup: threading.Event) -> None:
        self.store = store
        self.poll = poll
        self.hangup = hangup
        self._next = self._after(time.monotonic())

    def _after(self, now: float) -> float:
        if self.poll is None:
            return now
        return now + self.poll if self.poll else float("inf")

    def due(self, now: float | None = None) -> bool:
        """SIGHUP came or the poll is due: ``check`` would read the file (an event loop asks first, and
        reads it in a worker thread only then)."""
        return self.hangup.is_set() or (time.monotonic() if now is None else now) >= self._next

    def check(self, now: float | None = None) -> bool:
        """Reload when SIGHUP came or the poll is due; True when a new policy is active."""
        now = time.monotonic() if now is None else now
        asked = self.hangup.is_set()
        if not asked and now < self._next:
            return False
        self.hangup.clear()
        self._next = self._after(now)
        try:
            return self.store.reload("SIGHUP") if asked else self.store.reload_if_changed()
        except Exception:
            log.exception("policy reload failed unexpectedly; keeping the running policy")
            return False


class Heartbeat:
    """A loop's proof of life for ``/healthz``: ``beat()`` each turn; ``healthy`` fails once the last beat
    is older than ``limit()`` seconds, so the kubelet restarts a program whose loop stopped turning."""

    def __init__(self, what: str, limit: Callable[[], float]) -> None:
        self.what = what
        self.limit = limit
        self.last = time.monotonic()

    def beat(self) -> None:
        self.last = time.monotonic()

    def healthy(self) -> tuple[bool, str]:
        age = time.monotonic() - self.last
        if age > self.limit():
            return False, f"the {self.what} has not run for {age:.0f}s"
        return True, "ok"


class Refused(Exception):
    """Start-up cannot go on: the message says what to fix; ``code`` is the exit code (2: the flags or the
    files they name cannot work, checked before any API call; 1: something the program needs at start
    failed, such as reading the node's topology)."""

    def __init__(self, message: str, code: int = 2, *, usage: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.usage = usage
        """A usage error (a flag missing), printed as it is, as argparse prints its own; else logged."""

    def report(self, logger: logging.Logger) -> int:
        """Say what to fix; returns the exit code."""
        if self.usage:
            print(self, file=sys.stderr)
        else:
            logger.error("%s", self)
        return self.code


class HealthFailed(RuntimeError):
    """The health endpoint could not listen (logged): the program exits with code 1."""


def serve_health(
    args: argparse.Namespace,
    registry: CollectorRegistry,
    *,
    name: str,
    ready: Probe,
    healthy: Probe = serving,
    pages: Mapping[str, Callable[[], bytes]] | None = None,
) -> HealthServer | None:
    """The endpoint ``--metrics-address``/``--metrics-port`` name, started; ``None`` when the port is 0 (off).
    Raises ``HealthFailed`` when it cannot listen."""
    if not args.metrics_port:
        return None
    server = HealthServer.serve(
        args.metrics_address,
        args.metrics_port,
        registry,
        ready=ready,
        healthy=healthy,
        name=name,
        pages=pages,
    )
    if server is None:
        raise HealthFailed(f"cannot serve on {args.metrics_address}:{args.metrics_port}")
    return server


class Watch(Protocol):
    """What ``watches_ready`` reads of a ``ballast.kube.client.Reflector``."""

    name: str
    synced: threading.Event


class Refusal(Protocol):
    error: str


class Store(Protocol):
    """What ``watches_ready`` reads of a ``PolicyStore``."""

    failure: Refusal | None


def watches_ready(watches: Iterable[Watch], store: Store | None = None) -> tuple[bool, str] | None:
    """The ``/readyz`` answer while a watch has not listed yet or the last policy reload was refused;
    ``None`` when neither holds (the program then adds its own checks)."""
    waiting = [w.name for w in watches if not w.synced.is_set()]
    if waiting:
        return False, "waiting for the first list of " + ", ".join(waiting)
    if store is not None and store.failure is not None:
        return False, f"policy reload refused, still running the previous policy: {store.failure.error}"
    return None
