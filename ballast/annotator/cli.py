"""``ballast annotator``: command-line flags; ``COMMAND`` declares it to ``ballast``
(``ballast.program.skeleton``).

The handler (``args.func``) returns the exit code: 0 done (``--once``) or clean shutdown; 1 a runtime
failure (Prometheus unreachable at start-up, a ``--once`` cycle that could not sync everything);
2 a configuration problem (policy, flags, kubeconfig). The work happens in ``ballast.annotator.run``.
"""

from __future__ import annotations

import argparse

from ballast.program.flags import (
    add_kubeconfig,
    add_policy_poll,
    add_serving,
    duration,
    non_negative_int,
    positive_int,
)
from ballast.program.leader import add_leader_flags
from ballast.program.skeleton import Command

__all__ = ["COMMAND", "add_flags"]


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE")
    return key.strip(), value


def _template(text: str) -> str:
    if "{metric}" not in text:
        raise argparse.ArgumentTypeError(f"{text!r} must contain {{metric}}, where the metric name goes")
    return text


def add_flags(p: argparse.ArgumentParser) -> None:
    """``ballast annotator``'s own flags (the logging flags come last, from the skeleton)."""
    p.add_argument(
        "--policy",
        required=True,
        metavar="FILE",
        help="DynamicSchedulerPolicy YAML (crane's format): syncPolicy gives the metrics and their "
        "periods, hotValue the binding windows; re-read when the file changes or on SIGHUP (a file that "
        "does not load is refused and the running policy kept)",
    )
    add_policy_poll(p)
    p.add_argument(
        "--prometheus-url",
        required=True,
        metavar="URL",
        help="base URL of the Prometheus HTTP API, with any path prefix (http://prometheus:9090, "
        "https://thanos.example/prom)",
    )
    add_kubeconfig(p)
    p.add_argument(
        "--node-selector",
        default="",
        metavar="SELECTOR",
        help="label selector of the nodes to annotate (e.g. 'node-role.kubernetes.io/worker'); "
        "empty means all nodes",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="run one full cycle (every metric and the hot value), then exit: 0 when everything synced, "
        "1 otherwise; no leader election unless --leader-elect is given",
    )

    prom = p.add_argument_group("Prometheus")
    prom.add_argument(
        "--prometheus-timeout",
        type=duration,
        default="10s",
        metavar="DURATION",
        help="timeout of one HTTP request to Prometheus",
    )
    prom.add_argument(
        "--prometheus-retries",
        type=non_negative_int,
        default=2,
        metavar="N",
        help="extra attempts, with exponential backoff, after a 5xx, 429, timeout or connection error",
    )
    prom.add_argument(
        "--prometheus-bearer-token-file",
        metavar="FILE",
        help="send 'Authorization: Bearer <contents>'; the file is re-read on every request",
    )
    prom.add_argument("--prometheus-username", metavar="NAME", help="basic auth user name")
    prom.add_argument(
        "--prometheus-password-file", metavar="FILE", help="basic auth password, read from this file"
    )
    prom.add_argument(
        "--prometheus-ca-file", metavar="FILE", help="CA bundle to verify the Prometheus TLS certificate"
    )
    prom.add_argument("--prometheus-cert-file", metavar="FILE", help="client certificate for mutual TLS")
    prom.add_argument("--prometheus-key-file", metavar="FILE", help="key of --prometheus-cert-file")
    prom.add_argument(
        "--prometheus-insecure-skip-verify",
        action="store_true",
        help="do not verify the Prometheus TLS certificate (testing only)",
    )
    prom.add_argument(
        "--prometheus-param",
        type=_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra query parameter on every query (repeatable), e.g. dedup=true or partial_response=false "
        "for Thanos",
    )
    prom.add_argument(
        "--prometheus-header",
        type=_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra HTTP header on every request (repeatable), e.g. X-Scope-OrgID=team-a for Mimir",
    )
    prom.add_argument(
        "--query-template",
        type=_template,
        default="{metric}",
        metavar="PROMQL",
        help="PromQL sent per policy metric; {metric} is replaced by the metric name, e.g. "
        "'{metric}{cluster=\"prod\"}'. Values must be percentages (crane's recording rules)",
    )
    prom.add_argument(
        "--match-label",
        default="instance",
        metavar="LABEL",
        help="series label naming the node: matched against the node's InternalIP, IP:port, name, "
        "name:port, in that order",
    )

    hot = p.add_argument_group("hot value (recent bindings per node)")
    hot.add_argument(
        "--binding-source",
        choices=("pods", "events", "both"),
        default="pods",
        help="where bindings come from: pods (list+watch, dated by the PodScheduled condition; deletions "
        "stop counting), events (crane's Scheduled events, for clusters where pods may not be watched), "
        "or both (deduplicated by pod UID)",
    )
    hot.add_argument(
        "--hot-value-interval",
        type=duration,
        default="1m",
        metavar="DURATION",
        help="refresh the hot value at least this often (every cycle refreshes it too)",
    )
    hot.add_argument(
        "--max-bindings-per-node",
        type=positive_int,
        default=4096,
        metavar="N",
        help="bound on the bindings remembered per node (the newest are kept)",
    )

    add_leader_flags(p, "ballast-annotator", "writes", "writing")

    srv = add_serving(
        p,
        port_default=8090,
        endpoints="/healthz, /readyz and /metrics",
        relists="nodes and the binding source (bound pods, Scheduled events: --binding-source)",
    )
    srv.add_argument(
        "--patch-concurrency",
        type=positive_int,
        default=8,
        metavar="N",
        help="node patches in flight at once",
    )


COMMAND = Command(
    name="annotator",
    help="write node load (from Prometheus) and hot values (recent bindings) onto Node annotations",
    description=(
        "Query Prometheus once per policy metric for all nodes, count recent pod bindings, "
        "and write both onto Node annotations (crane-scheduler's format) with one merge patch per node, "
        "only when something changed. Runs continuously under Lease leader election, or once with --once."
    ),
    flags=add_flags,
    run="ballast.annotator.run:run",
)
