"""Label and field selectors with the API server's grammar and matching rules.

Ballast's agent watches `spec.nodeName=<node>` pods and the extender may list unbound pods with
`spec.nodeName=`, so the fake must evaluate selectors like the server does, including the subtle parts:
`!=` and `notin` match objects that lack the label, and an unsupported field label is a 400.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .errors import bad_request

_KEY_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if not present:
            return False
        try:
            number = int(value or "")
        except ValueError:
            return False
        limit = int(self.values[0])
        return number > limit if self.op == "gt" else number < limit


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside `( )`, as `in (a,b)` contains commas."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _check_key(key: str, raw: str) -> None:
    if not key or not _KEY_RE.match(key):
        raise bad_request(f"unable to parse requirement: invalid label key {key!r} in {raw!r}")


def parse_label_selector(text: str | None) -> list[LabelRequirement]:
    """Parse `a=b,c!=d,e in (x,y),!f,g` into requirements (an empty selector matches everything)."""
    if not text or not text.strip():
        return []
    requirements: list[LabelRequirement] = []
    for raw in _split_top_level(text):
        term = raw.strip()
        if not term:
            raise bad_request(f"unable to parse requirement: found '', expected: identifier in {text!r}")
        set_match = re.match(r"^(\S+)\s+(in|notin)\s*\((.*)\)$", term)
        if set_match:
            key, op, inner = set_match.groups()
            _check_key(key, term)
            values = tuple(v.strip() for v in inner.split(",") if v.strip())
            if not values:
                raise bad_request(
                    "unable to parse requirement: for 'in', 'notin' operators, values set can't be empty"
                )
            requirements.append(LabelRequirement(key, op, values))
            continue
        if term.startswith("!"):
            key = term[1:].strip()
            _check_key(key, term)
            requirements.append(LabelRequirement(key, "!"))
            continue
        op_match = re.match(r"^([^=!<>\s]+)\s*(==|=|!=|>|<)\s*(.*)$", term)
        if op_match:
            key, op, value = op_match.groups()
            _check_key(key, term)
            value = value.strip()
            if op in (">", "<"):
                if not re.fullmatch(r"-?\d+", value):
                    raise bad_request(
                        "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer"
                    )
                requirements.append(LabelRequirement(key, "gt" if op == ">" else "lt", (value,)))
            else:
                requirements.append(LabelRequirement(key, "!=" if op == "!=" else "=", (value,)))
            continue
        if re.fullmatch(r"\S+", term):
            _check_key(term, term)
            requirements.append(LabelRequirement(term, "exists"))
            continue
        raise bad_request(f"unable to parse requirement: {term!r}")
    return requirements


def labels_match(requirements: list[LabelRequirement], labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    return all(r.matches(labels) for r in requirements)


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    negate: bool
    value: str


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def parse_field_selector(text: str | None, supported: frozenset[str]) -> list[FieldRequirement]:
    """Parse `a=b,c!=d` (also `==`); values may escape `,` `=` `\\`. Unknown fields are a 400, as on the
    server."""
    if not text or not text.strip():
        return []
    requirements = []
    for raw in _split_unescaped(text, ","):
        term = raw.strip()
        match = re.match(r"^((?:[^=!\\]|\\.)+?)\s*(!=|==|=)(.*)$", term)
        if not match:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        field, op, value = match.groups()
        if field not in supported:
            raise bad_request(f"field label not supported: {field}")
        requirements.append(FieldRequirement(field, op == "!=", _unescape(value)))
    return requirements


def fields_match(requirements: list[FieldRequirement], fields: Mapping[str, str]) -> bool:
    for r in requirements:
        equal = fields.get(r.field, "") == r.value
        if equal == r.negate:
            return False
    return True


@dataclass(frozen=True)
class Selector:
    """A parsed labelSelector + fieldSelector pair, evaluated against whole objects."""

    labels: tuple[LabelRequirement, ...] = ()
    fields: tuple[FieldRequirement, ...] = ()
    field_getter: Callable[[dict], dict[str, str]] | None = None

    @property
    def empty(self) -> bool:
        return not self.labels and not self.fields

    def matches(self, obj: dict) -> bool:
        meta = obj.get("metadata") or {}
        if self.labels and not labels_match(list(self.labels), meta.get("labels")):
            return False
        if self.fields:
            assert self.field_getter is not None
            if not fields_match(list(self.fields), self.field_getter(obj)):
                return False
        return True


def build_selector(
    label_selector: str | None,
    field_selector: str | None,
    supported_fields: frozenset[str],
    field_getter: Callable[[dict], dict[str, str]],
) -> Selector:
    labels = parse_label_selector(label_selector)
    fields = parse_field_selector(field_selector, supported_fields)
    return Selector(tuple(labels), tuple(fields), field_getter)
