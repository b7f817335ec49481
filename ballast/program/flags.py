"""What every ``ballast`` command's flags share: the help formatter, the flag types (durations, ports) and
the logging flags (``add_common``), so flags read and fail one way in the extender, annotator and agent."""

from __future__ import annotations

import argparse
from typing import Any

from ballast.contract.durations import parse_duration
from ballast.program.logs import LEVELS

__all__ = [
    "HelpFormatter",
    "add_common",
    "duration",
    "duration_or_off",
    "non_negative_int",
    "port",
    "positive_int",
    "positive_seconds",
    "seconds",
]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show defaults that say something: not None, False, empty, or ones the help already states."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.required or action.default in (None, False, "", []) or "default" in text:
            return text
        return super()._get_help_string(action)


def add_common(p: argparse.ArgumentParser) -> None:
    """``--log-level`` and ``--log-format``, which ``ballast.program.logs.setup_logging`` takes."""
    p.add_argument("--log-level", choices=LEVELS, default="info", help="log verbosity")
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text for people, json for log pipelines",
    )


WATCH_STALL_DEFAULT = "2m"
"""``--watch-stall-timeout``'s default: ``ballast.kube.client.WATCH_STALL_SECONDS`` (a test keeps them
equal)."""
WATCH_STALL_HELP = (
    "a watch that sends nothing, not even a bookmark, for this long is broken: it is relisted, and its "
    "cache counts as not synced until that list succeeds (kube-apiserver sends a bookmark about every "
    "minute; keep this above that, at most 2m)"
)


def add_watch_stall(p: argparse.ArgumentParser | Any) -> None:
    """``--watch-stall-timeout``, the same flag with the same default in every program that watches."""
    p.add_argument(
        "--watch-stall-timeout",
        type=positive_seconds,
        default=WATCH_STALL_DEFAULT,
        metavar="DURATION",
        help=WATCH_STALL_HELP,
    )


def add_kubeconfig(p: argparse.ArgumentParser | Any) -> None:
    """``--kubeconfig``, read by ``ballast.kube.client.connect`` the same way in every program that needs the
    API."""
    p.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig for the API server; without it KUBECONFIG, else the in-cluster service account",
    )


def add_policy_poll(p: argparse.ArgumentParser | Any) -> None:
    """``--policy-poll``: how often a program that reloads its policy file looks at it."""
    p.add_argument(
        "--policy-poll",
        type=duration_or_off,
        default="2s",
        metavar="DURATION",
        help="how often to check the policy file for changes (0 disables; SIGHUP still reloads)",
    )


def add_metrics_endpoint(
    p: argparse.ArgumentParser | Any, *, port_default: int, endpoints: str, once: bool
) -> None:
    """``--metrics-port`` and ``--metrics-address`` of the endpoint serving ``endpoints`` (the health checks
    and /metrics, and what else the program serves); ``once``: the program has a ``--once`` that serves
    nothing."""
    after = "; not served with --once" if once else ""
    p.add_argument(
        "--metrics-port",
        type=port,
        default=port_default,
        metavar="PORT",
        help=f"port of {endpoints} (0 disables it{after})",
    )
    p.add_argument(
        "--metrics-address", default="0.0.0.0", metavar="ADDR", help="address the endpoint listens on"
    )


def add_serving(
    p: argparse.ArgumentParser, *, port_default: int, endpoints: str, relists: str
) -> argparse._ArgumentGroup:
    """The "serving and API" group of an elected program that serves an endpoint, runs ``--once`` too, and
    watches the API server: the endpoint (``add_metrics_endpoint``), ``--api-timeout``,
    ``--watch-stall-timeout`` and ``--resync`` (what it ``relists``). Returned, for the program's own
    flags."""
    srv = p.add_argument_group("serving and API")
    add_metrics_endpoint(srv, port_default=port_default, endpoints=endpoints, once=True)
    srv.add_argument(
        "--api-timeout",
        type=duration,
        default="10s",
        metavar="DURATION",
        help="timeout of one Kubernetes API call",
    )
    add_watch_stall(srv)
    srv.add_argument(
        "--resync",
        type=duration,
        default="5m",
        metavar="DURATION",
        help=f"relist {relists} this often even when the watches are healthy",
    )
    return srv


def duration_or_off(text: str) -> float:
    """A Go duration (``2s``, ``1m``, ``1h30m``) in seconds; zero (in any unit) means off."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def duration(text: str) -> float:
    """A Go duration longer than zero, in seconds."""
    value = duration_or_off(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than zero")
    return value


def seconds(text: str) -> float:
    """A duration (``2s``, ``1m``, ``1h30m``); a plain number is seconds, as the extender's flags always
    took."""
    try:
        value = float(text)
    except ValueError:
        value = duration_or_off(text)
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def positive_seconds(text: str) -> float:
    value = seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than zero")
    return value


def _integer(text: str, noun: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a {noun}") from None


def port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: the caller disables the endpoint or lets the OS pick)."""
    number = _integer(text, "port number")
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{number} is not a port number (0-65535)")
    return number


def positive_int(text: str) -> int:
    value = _integer(text, "whole number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    value = _integer(text, "whole number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must not be negative")
    return value
