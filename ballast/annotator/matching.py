"""Which Prometheus series belongs to which Node: pure, one pass over the series and one over the nodes.

crane sent up to three regex queries per node and metric (``instance=~"<IP>"``, ``"<IP>:.+"``,
``"<name>"``) and let the last matching series win. Ballast queries each metric once for every node
and maps the answer here, by one label (``instance`` unless configured), trying for each node:

1. the label equals one of the node's InternalIPs (``10.0.0.7``);
2. the label is one of those IPs with a port (``10.0.0.7:9100``, ``[fd00::7]:9100``);
3. the label equals the node name (``worker-1``);
4. the label is the node name with a port (``worker-1:9100``).

The first rule that finds a series with a usable value wins, so a node-exporter scraped by IP is found
even when some other job exports the same metric under the node name. Values that are NaN, infinite or
negative are not usable: they are "no data", never "idle" (crane turned them into 0). When one rule
finds several usable series for a node (two exporters, two jobs), the choice is deterministic: the
highest value (a node looks no idler than its busiest series), then the smallest label set, and the
conflict is reported so the caller can log it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

__all__ = [
    "Conflict",
    "MatchResult",
    "MatchRule",
    "NodeAddresses",
    "Series",
    "host_of",
    "match_series",
    "usable",
]


class MatchRule(IntEnum):
    """How a series was tied to a node, best first."""

    IP = 0
    IP_PORT = 1
    NAME = 2
    NAME_PORT = 3


@dataclass(frozen=True, slots=True)
class Series:
    """One element of an instant vector: its labels and the value exactly as Prometheus returned it."""

    labels: Mapping[str, str]
    value: float

    def describe(self) -> str:
        inner = ",".join(f'{k}="{v}"' for k, v in sorted(self.labels.items()) if k != "__name__")
        return f"{self.labels.get('__name__', '')}{{{inner}}}"


@dataclass(frozen=True, slots=True)
class NodeAddresses:
    """What a series label can name: the node's name and its InternalIPs (dual-stack nodes have two)."""

    name: str
    internal_ips: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Conflict:
    """Several usable series matched one node by the same rule; ``kept`` won, ``dropped`` lost."""

    node: str
    rule: MatchRule
    kept: Series
    dropped: tuple[Series, ...]


@dataclass(slots=True)
class MatchResult:
    values: dict[str, float] = field(default_factory=dict)
    """Node name -> the chosen series' raw value (usable: finite and not negative)."""
    rules: dict[str, MatchRule] = field(default_factory=dict)
    """Node name -> the rule that matched it."""
    unusable: dict[str, float] = field(default_factory=dict)
    """Nodes whose only matching series had NaN, infinite or negative values (no data)."""
    conflicts: list[Conflict] = field(default_factory=list)
    unmatched: int = 0
    """Series that named no node (other clusters, removed nodes, missing label)."""


def usable(value: float) -> bool:
    """A value that means something: finite and not negative."""
    return not math.isnan(value) and not math.isinf(value) and value >= 0


def host_of(address: str) -> str | None:
    """The host of ``host:port`` / ``[v6]:port``, or ``None`` when the text carries no port."""
    if address.startswith("["):
        end = address.find("]")
        if end > 0 and address[end + 1 : end + 2] == ":" and address[end + 2 :].isdigit():
            return address[1:end]
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or ":" in host:
        return None  # no port, or a bare IPv6 address
    return host


def _best(candidates: list[Series]) -> tuple[Series, tuple[Series, ...]]:
    ordered = sorted(candidates, key=lambda s: (-s.value, sorted(s.labels.items())))
    return ordered[0], tuple(ordered[1:])


def match_series(
    series: Iterable[Series], nodes: Sequence[NodeAddresses], label: str = "instance"
) -> MatchResult:
    """Map each node to at most one series (see the module docstring for the rules)."""
    exact: dict[str, list[Series]] = {}
    with_port: dict[str, list[Series]] = {}
    all_series: list[Series] = []
    for s in series:
        all_series.append(s)
        value = s.labels.get(label)
        if not value:
            continue
        exact.setdefault(value, []).append(s)
        host = host_of(value)
        if host is not None:
            with_port.setdefault(host, []).append(s)

    result = MatchResult()
    used: set[int] = set()
    for node in nodes:
        lookups: tuple[tuple[MatchRule, Mapping[str, list[Series]], Sequence[str]], ...] = (
            (MatchRule.IP, exact, node.internal_ips),
            (MatchRule.IP_PORT, with_port, node.internal_ips),
            (MatchRule.NAME, exact, (node.name,)),
            (MatchRule.NAME_PORT, with_port, (node.name,)),
        )
        unusable_value: float | None = None
        for rule, index, keys in lookups:
            found: list[Series] = []
            for key in keys:
                found.extend(index.get(key, ()))
            if not found:
                continue
            used.update(id(s) for s in found)
            good = [s for s in found if usable(s.value)]
            if not good:
                if unusable_value is None:
                    unusable_value = found[0].value
                continue
            kept, dropped = _best(good) if len(good) > 1 else (good[0], ())
            result.values[node.name] = kept.value
            result.rules[node.name] = rule
            if dropped:
                result.conflicts.append(Conflict(node.name, rule, kept, dropped))
            break
        else:
            if unusable_value is not None:
                result.unusable[node.name] = unusable_value
    result.unmatched = sum(1 for s in all_series if id(s) not in used)
    return result
