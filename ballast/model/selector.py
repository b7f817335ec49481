"""Kubernetes label selectors (``matchLabels`` / ``matchExpressions``), parsed once and matched as pure logic.

Node pools pick their nodes with the same selector an operator already writes for Deployments and
NetworkPolicies, with the same semantics (``metav1.LabelSelector``): every ``matchLabels`` pair and every
expression must hold; ``In`` / ``NotIn`` take a non-empty ``values`` list, ``Exists`` / ``DoesNotExist``
none; ``NotIn`` and ``DoesNotExist`` hold on a node without the key. An empty selector matches every node
(as in Kubernetes), which makes a catch-all pool possible.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ballast.contract.numbers import shown

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            return labels.get(self.key) in self.values
        if op == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if op == "Exists":
            return self.key in labels
        return self.key not in labels  # DoesNotExist


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def to_json(self) -> dict[str, Any]:
        return {
            "matchExpressions": [
                {"key": r.key, "operator": r.operator, "values": sorted(r.values)} for r in self.requirements
            ]
        }


def parse_selector(value: Any, path: str) -> tuple[LabelSelector | None, list[tuple[str, str]]]:
    """The selector and the problems found, each as ``(field path, reason)``; ``None`` when any."""
    problems: list[tuple[str, str]] = []
    if not isinstance(value, Mapping):
        return None, [(path, "required: a label selector with matchLabels and/or matchExpressions")]
    for key in value:
        if key not in ("matchLabels", "matchExpressions"):
            problems.append((f"{path}.{key}", "unknown field (allowed: matchExpressions, matchLabels)"))
    reqs: list[Requirement] = []
    labels = value.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        problems.append((f"{path}.matchLabels", "expected a mapping of label key to value"))
        labels = {}
    for k, v in labels.items():
        if not isinstance(k, str) or not k or not isinstance(v, str):
            problems.append((f"{path}.matchLabels.{k}", f"expected a string label value, got {shown(v)}"))
            continue
        reqs.append(Requirement(k, "In", frozenset((v,))))
    exprs = value.get("matchExpressions") or []
    if not isinstance(exprs, list):
        problems.append((f"{path}.matchExpressions", "expected a list"))
        exprs = []
    for i, e in enumerate(exprs):
        epath = f"{path}.matchExpressions[{i}]"
        if not isinstance(e, Mapping):
            problems.append((epath, "expected a mapping with key, operator and values"))
            continue
        for k in e:
            if k not in ("key", "operator", "values"):
                problems.append((f"{epath}.{k}", "unknown field (allowed: key, operator, values)"))
        key, op, values = e.get("key"), e.get("operator"), e.get("values")
        if not isinstance(key, str) or not key:
            problems.append((f"{epath}.key", "required: a label key"))
            continue
        if op not in OPERATORS:
            problems.append((f"{epath}.operator", f"expected one of {', '.join(OPERATORS)}, got {shown(op)}"))
            continue
        if op in ("In", "NotIn"):
            if not isinstance(values, list) or not values or not all(isinstance(x, str) for x in values):
                problems.append((f"{epath}.values", f"{op} needs a non-empty list of strings"))
                continue
        elif values not in (None, []):
            problems.append((f"{epath}.values", f"{op} takes no values"))
            continue
        reqs.append(Requirement(key, op, frozenset(values or ())))
    if problems:
        return None, problems
    return LabelSelector(tuple(reqs)), []
