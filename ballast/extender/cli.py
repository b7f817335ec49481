"""``ballast extender``: the extender's command line; ``COMMAND`` declares it to ``ballast``
(``ballast.program.skeleton``), and its handler (``args.func``) returns the exit code."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from ballast import __version__
from ballast.contract.exclusive import DEFAULT_SCHEDULERS
from ballast.contract.seal import SealKeyError, load_key
from ballast.extender.api.body import (
    DEFAULT_BODY_TIMEOUT_SECONDS,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_BODY_BYTES_IN_FLIGHT,
)
from ballast.extender.connections import DEFAULT_FIRST_BYTE_TIMEOUT, DEFAULT_MAX_CONNECTIONS
from ballast.model.policy import PolicyError, load_policy
from ballast.program.flags import add_watch_stall, positive_seconds, seconds
from ballast.program.skeleton import Command

log = logging.getLogger("ballast")


def add_flags(p: argparse.ArgumentParser) -> None:
    """``ballast extender``'s own flags (the logging flags come last, from the skeleton)."""
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8888, help="port to listen on")
    p.add_argument(
        "--policy",
        required=True,
        metavar="FILE",
        help="DynamicSchedulerPolicy YAML (crane's format); reloaded on SIGHUP or when the file changes",
    )
    p.add_argument(
        "--policy-poll",
        type=seconds,
        default="2s",
        metavar="DURATION",
        help="how often to check the policy file for changes (0 disables; SIGHUP still reloads)",
    )
    p.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="cluster access for the node cache and bind (else KUBECONFIG, else in-cluster; without any, "
        "the extender runs standalone and passes names-only requests unscored)",
    )
    p.add_argument(
        "--resync",
        type=positive_seconds,
        default="5m",
        metavar="DURATION",
        help="relist nodes, bound pods and NodeResourceTopologies this often even when the watches are "
        "healthy",
    )
    add_watch_stall(p)
    p.add_argument(
        "--nrt-assume-ttl",
        type=positive_seconds,
        default="2m",
        metavar="DURATION",
        help="how long a pod bound to a node with a community NodeResourceTopology (v1alpha2) counts "
        "against its zone when the object publishes no pods fingerprint that shows it counted; longer "
        "than the exporter's update interval (nfd-topology-updater: 60s)",
    )
    p.add_argument(
        "--api-timeout",
        type=positive_seconds,
        default="4s",
        metavar="DURATION",
        help="timeout of one API call, and of all the calls of one bind together (keep it under the "
        "scheduler's httpTimeout so bind errors reach it)",
    )
    p.add_argument(
        "--scheduler-name",
        dest="scheduler_names",
        action="append",
        metavar="NAME",
        help="scheduler whose pods' topology results count against NUMA zones, as the agent's flag of the "
        "same name; repeat for several (when not given: ballast-scheduler)",
    )
    p.add_argument(
        "--result-key-file",
        metavar="FILE",
        help="key (at least 32 bytes, e.g. a mounted Secret) to seal the topology results bind writes, so "
        "the agent can tell them from forged ones; give the agent the same key. With it, only sealed results "
        "count against NUMA zones",
    )
    p.add_argument(
        "--access-log",
        action="store_true",
        help="log a line per request (method, path, status, milliseconds) at INFO; without it only failed "
        "and slow requests are logged, and a summary per minute",
    )
    p.add_argument(
        "--quiet-access",
        action="store_true",
        help=argparse.SUPPRESS,  # deprecated no-op: quiet is the default; kept so old manifests still start
    )
    p.add_argument(
        "--slow-request",
        type=positive_seconds,
        default="100ms",
        metavar="DURATION",
        help="log a request that takes longer than this (WARNING), whatever --access-log says",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="BYTES",
        help="refuse larger request bodies with 413, before reading them when Content-Length says so",
    )
    p.add_argument(
        "--max-body-bytes-in-flight",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES_IN_FLIGHT,
        metavar="BYTES",
        help="request body bytes held at once across all requests; a request past it gets 503 (retried)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help="open connections at most; a connection past it is closed at once",
    )
    p.add_argument(
        "--first-byte-timeout",
        type=float,
        default=DEFAULT_FIRST_BYTE_TIMEOUT,
        metavar="SECONDS",
        help="a new connection whose first request line and headers have not all arrived by then is closed",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=DEFAULT_BODY_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="a request body must arrive within this time, else 408 and the connection is closed",
    )


def run_extender(args: argparse.Namespace) -> int:
    from ballast.extender.main import create_app
    from ballast.kube.client import KubeConfigError, cluster_configured, connect

    if args.quiet_access:
        log.warning(
            "--quiet-access is deprecated and does nothing: the access log is quiet by default "
            "(--access-log turns the line per request on); remove the flag"
        )
    try:
        policy = load_policy(args.policy)
    except PolicyError as exc:
        log.error("%s", exc)
        return 2
    try:
        result_key = load_key(args.result_key_file) if args.result_key_file else None
    except SealKeyError as exc:
        log.error("%s", exc)
        return 2
    kube = None
    if cluster_configured(args.kubeconfig):
        try:
            kube = connect(args.kubeconfig, f"ballast-extender/{__version__}", args.api_timeout)
        except KubeConfigError as exc:
            log.error("%s", exc)
            return 2
        log.info("cluster access configured: watching nodes and pods, serving names-only requests and bind")
    else:
        log.info("no cluster access configured: standalone mode (whole-node requests only, no bind)")
    app = create_app(
        policy,
        policy_path=args.policy,
        policy_poll_seconds=args.policy_poll,
        kube=kube,
        resync_seconds=args.resync,
        watch_stall_seconds=args.watch_stall_timeout,
        nrt_assume_ttl=args.nrt_assume_ttl,
        scheduler_names=args.scheduler_names or DEFAULT_SCHEDULERS,
        result_key=result_key,
        access_log=args.access_log,
        slow_request=args.slow_request,
        max_body_bytes=args.max_body_bytes,
        body_timeout=args.body_timeout,
        max_body_bytes_in_flight=args.max_body_bytes_in_flight,
    )
    config = server_config(
        app,
        args.host,
        args.port,
        max_connections=args.max_connections,
        first_byte_timeout=args.first_byte_timeout,
    )
    _listening_server(config, args.policy).run()
    return 0


def server_config(
    app: Any,
    host: str,
    port: int,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    first_byte_timeout: float = DEFAULT_FIRST_BYTE_TIMEOUT,
) -> Any:
    """uvicorn's configuration for the extender's server, the one place it is set: the tests serve the app
    with it, so every hardening test runs against the protocol that ships (``bounded_protocol``)."""
    import uvicorn

    from ballast.extender.connections import bounded_protocol

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        http=bounded_protocol(max_connections, first_byte_timeout),
        ws="none",
        timeout_keep_alive=5,
        # kube-scheduler calls the extender directly, and Ballast reads no client address: uvicorn's
        # X-Forwarded-* middleware would only add a layer (and a header scan from loopback) to every call.
        proxy_headers=False,
    )


def _listening_server(config: Any, policy_path: str) -> Any:
    """uvicorn's server, saying "listening on" only once the socket is bound (with the real port, which
    ``--port 0`` picks); a port already in use ends the process with uvicorn's error instead."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if not self.started:
                return
            for server in self.servers:
                for sock in server.sockets:
                    host, port = sock.getsockname()[:2]
                    log.info(
                        "ballast extender %s listening on %s:%d with policy %s",
                        __version__,
                        host,
                        port,
                        policy_path,
                    )

    return Server(config)


COMMAND = Command(
    name="extender",
    help="run the scheduler extender (filter, prioritize, bind, preempt) that kube-scheduler calls",
    description=(
        "Serve kube-scheduler's extender verbs over HTTP. Without cluster access every "
        "NodeNames-only request passes unscored; give --kubeconfig (or run in a cluster) to serve "
        "nodeCacheCapable: true and bind."
    ),
    flags=add_flags,
    run="ballast.extender.cli:run_extender",
)
