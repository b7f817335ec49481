from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ballast.model.policy import (
    ESTIMATION_FIELDS,
    HOT_VALUE_FIELDS,
    PREDICATE_FIELDS,
    PRIORITY_FIELDS,
    SPEC_FIELDS,
    SYNC_POLICY_FIELDS,
    TOPOLOGY_FIELDS,
    PolicyError,
    load_policy,
    parse_policy,
)
from ballast.model.pools import POOL_FIELDS
from ballast.testing.parts import POLICY_FILE, ROOT

BASE = """
apiVersion: scheduler.policy.crane.io/v1alpha1
kind: DynamicSchedulerPolicy
spec:
  syncPolicy:
    - {name: cpu_usage_avg_5m, period: 3m}
    - {name: mem_usage_avg_5m, period: 3m}
"""


def test_bundled_policy_is_cranes_default() -> None:
    p = load_policy(POLICY_FILE)
    assert p.sync_periods == {
        "cpu_usage_avg_5m": 180,
        "cpu_usage_max_avg_1h": 900,
        "cpu_usage_max_avg_1d": 10800,
        "mem_usage_avg_5m": 180,
        "mem_usage_max_avg_1h": 900,
        "mem_usage_max_avg_1d": 10800,
    }
    assert [(x.name, x.max_limit) for x in p.predicates] == [
        ("cpu_usage_avg_5m", 0.65),
        ("cpu_usage_max_avg_1h", 0.75),
        ("mem_usage_avg_5m", 0.65),
        ("mem_usage_max_avg_1h", 0.75),
    ]
    assert [x.weight for x in p.priorities] == [0.2, 0.3, 0.5, 0.2, 0.3, 0.5]
    assert [(h.time_range, h.count) for h in p.hot_values] == [(300, 5), (60, 2)]
    assert p.valid_for("cpu_usage_avg_5m") == 180 + 300
    assert p.resource_of("mem_usage_max_avg_1d") == "memory"


def test_both_spellings_of_the_limit() -> None:
    p = parse_policy(
        BASE + "  predicate:\n    - {name: cpu_usage_avg_5m, maxLimitPercent: 0.5}\n"
        "    - {name: mem_usage_avg_5m, maxLimitPecent: 0.6}\n"
    )
    assert [(x.name, x.max_limit) for x in p.predicates] == [
        ("cpu_usage_avg_5m", 0.5),
        ("mem_usage_avg_5m", 0.6),
    ]


@pytest.mark.parametrize(
    ("extra", "path", "reason"),
    [
        (
            "  predicate:\n    - {name: disk_usage, maxLimitPecent: 0.5}\n",
            "spec.predicate[0].name",
            "no syncPolicy",
        ),
        ("  priority:\n    - {name: gpu_usage, weight: 1}\n", "spec.priority[0].name", "no syncPolicy"),
        (
            "  priority:\n    - {name: cpu_usage_avg_5m, weight: -1}\n",
            "spec.priority[0].weight",
            "must be at least 0",
        ),
        (
            "  priority:\n    - {name: cpu_usage_avg_5m, weight: heavy}\n",
            "spec.priority[0].weight",
            "expected a number",
        ),
        (
            "  predicate:\n    - {name: cpu_usage_avg_5m, maxLimitPecent: 65}\n",
            "spec.predicate[0].maxLimitPecent",
            "must be in [0, 1]",
        ),
        (
            "  predicate:\n    - {name: cpu_usage_avg_5m, maxLimitPecent: -0.1}\n",
            "spec.predicate[0].maxLimitPecent",
            "out of range",
        ),
        ("  predicate:\n    - {name: cpu_usage_avg_5m}\n", "spec.predicate[0].maxLimitPecent", "required"),
        (
            "  predicate:\n    - {name: cpu_usage_avg_5m, maxLimitPecent: 0.5, maxLimitPercent: 0.5}\n",
            "spec.predicate[0]",
            "not both",
        ),
        (
            "  predicate:\n    - {name: cpu_usage_avg_5m, maxLimitPrecent: 0.5}\n",
            "spec.predicate[0].maxLimitPrecent",
            "unknown field",
        ),
        (
            "  hotValue:\n    - {timeRange: 5 minutes, count: 5}\n",
            "spec.hotValue[0].timeRange",
            "invalid duration",
        ),
        ("  hotValue:\n    - {timeRange: 5m, count: 0}\n", "spec.hotValue[0].count", "positive integer"),
        ("  legacyTimeZone: Mars/Olympus\n", "spec.legacyTimeZone", "unknown time zone"),
        ("  estimation: {cpuFactor: 2x}\n", "spec.estimation.cpuFactor", "expected a number"),
        ("  estimation: {defaultCpu: lots}\n", "spec.estimation.defaultCpu", "invalid quantity"),
        (
            "  metricResources: {cpu_usage_avg_5m: gpu}\n",
            "spec.metricResources.cpu_usage_avg_5m",
            "'cpu' or 'memory'",
        ),
        ("  surprise: 1\n", "spec.surprise", "unknown field"),
    ],
)
def test_validation_errors_name_the_field(extra: str, path: str, reason: str) -> None:
    with pytest.raises(PolicyError) as exc:
        parse_policy(BASE + extra, "p.yaml")
    assert any(p == path and reason in r for p, r in exc.value.problems), exc.value.problems
    assert str(exc.value).startswith("invalid policy p.yaml: ")


@pytest.mark.parametrize(
    ("text", "path", "reason"),
    [
        (BASE.replace("period: 3m}", "period: soon}", 1), "spec.syncPolicy[0].period", "invalid duration"),
        (BASE.replace("period: 3m}", "period: 0s}", 1), "spec.syncPolicy[0].period", "greater than zero"),
        (BASE.replace("mem_usage_avg_5m", "cpu_usage_avg_5m"), "spec.syncPolicy[1].name", "appears twice"),
        (BASE.replace("scheduler.policy.crane.io/v1alpha1", "v1"), "apiVersion", "expected"),
        (BASE.replace("DynamicSchedulerPolicy", "ConfigMap"), "kind", "expected"),
        ("spec: [1, 2]\n", "spec", "expected a mapping"),
        ("- 1\n", "(document)", "expected a YAML mapping"),
        ("spec: {syncPolicy: [{name: a, period: 3m}\n", "line", "not valid YAML"),
    ],
)
def test_document_level_errors(text: str, path: str, reason: str) -> None:
    with pytest.raises(PolicyError) as exc:
        parse_policy(text)
    assert any(p.startswith(path) and reason in r for p, r in exc.value.problems), exc.value.problems


def test_all_problems_reported_at_once() -> None:
    text = BASE + "  priority:\n    - {name: x, weight: -1}\n  hotValue:\n    - {timeRange: 5m, count: -1}\n"
    with pytest.raises(PolicyError) as exc:
        parse_policy(text)
    paths = {p for p, _ in exc.value.problems}
    assert {"spec.priority[0].name", "spec.priority[0].weight", "spec.hotValue[0].count"} <= paths


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as exc:
        load_policy(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(exc.value) and "cannot read" in str(exc.value)


def test_estimation_settings() -> None:
    p = parse_policy(
        BASE + "  estimation: {cpuFactor: 1.0, memoryFactor: 0.5, defaultCpu: 100m, defaultMemory: 64Mi, "
        "ttl: 10m, tentativeTTL: 15s}\n  metricResources: {mem_usage_avg_5m: memory}\n"
    )
    e = p.estimation
    assert (e.cpu_factor, e.memory_factor, e.default_cpu_milli, e.default_memory_bytes) == (
        1.0,
        0.5,
        100,
        64 << 20,
    )
    assert (e.ttl, e.tentative_ttl) == (600, 15)


# --- every bad file is refused the same way; every documented field is accepted ---------------------

REPO = ROOT


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("spec: " + "[" * 1000 + "]" * 1000 + "\n", id="nested-1000-deep"),
        pytest.param(
            BASE + "  priority:\n    - {name: cpu_usage_avg_5m, weight: " + "9" * 400 + "}\n", id="huge-int"
        ),
        pytest.param(BASE + "  legacyTimeZone: " + "A" * 300 + "\n", id="time-zone-over-255"),
    ],
)
def test_any_loading_failure_is_a_policy_error(text: str, tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(text)
    assert "\n" not in str(err.value)
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError):
        load_policy(path)


def test_reload_of_an_unforeseen_failure_is_refused(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from ballast.model.policy_store import PolicyStore, policy_reload_metrics

    registry = CollectorRegistry()
    reloads, ok = policy_reload_metrics("ballast", registry)

    class Metrics:
        policy_reloads = reloads
        policy_ok = ok

    path = tmp_path / "p.yaml"
    path.write_text(BASE)
    store = PolicyStore(load_policy(path), path, Metrics())
    path.write_text(BASE + "  legacyTimeZone: " + "A" * 300 + "\n")
    assert store.reload("test") is False
    assert store.failure is not None and "\n" not in store.failure.error
    assert registry.get_sample_value("ballast_policy_last_reload_ok") == 0
    # a check that refuses a policy is a refused policy too, not a TypeError
    refusing = PolicyStore(parse_policy(BASE), path, Metrics(), check=lambda p: "unusable here")
    path.write_text(BASE)
    assert refusing.reload("test") is False
    assert refusing.failure is not None and "unusable here" in refusing.failure.error


CONFIGURATION = REPO / "docs" / "configuration.md"
"""The configuration reference: the policy file's fields and the block of Ballast's own sections."""


def _documented_spec_fields() -> set[str]:
    readme = CONFIGURATION.read_text()
    return set(re.findall(r"^\| `spec\.(\w+)", readme, flags=re.M))


def test_every_documented_spec_field_is_accepted() -> None:
    fields = _documented_spec_fields()
    assert {"syncPolicy", "topology", "estimation"} <= fields
    with pytest.raises(PolicyError) as err:
        parse_policy(BASE + "  zzUnknown: 1\n")
    ((path, reason),) = err.value.problems
    assert path == "spec.zzUnknown"
    for name in sorted(fields):
        assert name in reason, f"spec.{name} is documented but refused as an unknown field"


def test_documented_topology_example_loads() -> None:
    policy = parse_policy(BASE + "  topology: {awareResources: [cpu, memory], scoreWeight: 0.3}\n")
    assert policy.topology.memory_aware and policy.topology.score_weight == 0.3


def _policy_documents() -> list[tuple[str, str]]:
    """Every policy the repository ships or shows: the policy files, the ConfigMap's copy and every YAML
    block in README.md and docs/ that is a DynamicSchedulerPolicy."""
    found = [("scheduler_config/policy.yaml", (REPO / "scheduler_config/policy.yaml").read_text())]
    for doc in yaml.safe_load_all((REPO / "scheduler_config/deploy/policy.yaml").read_text()):
        for key, text in (doc or {}).get("data", {}).items():
            found.append((f"deploy/policy.yaml:{key}", text))
    for md in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for i, block in enumerate(re.findall(r"^```ya?ml\n(.*?)^```", md.read_text(), flags=re.M | re.S)):
            if "DynamicSchedulerPolicy" in block:
                found.append((f"{md.name} block {i}", block))
    return found


@pytest.mark.parametrize("name,text", _policy_documents(), ids=[n for n, _ in _policy_documents()])
def test_every_shipped_or_documented_policy_loads(name: str, text: str) -> None:
    parse_policy(text, name)


def test_spec_sections_documented_and_parsed_are_the_same() -> None:
    """Both ways: no section is parsed without a reference row, and each row's fields are the parser's."""
    readme = CONFIGURATION.read_text()
    rows = dict(re.findall(r"^\| `spec\.(\w+)(?:\[\])?(?: \{([^}]*)\})?`", readme, flags=re.M))
    assert set(rows) == SPEC_FIELDS
    allowed = {
        "syncPolicy": SYNC_POLICY_FIELDS,
        "predicate": PREDICATE_FIELDS,
        "priority": PRIORITY_FIELDS,
        "nodePools": POOL_FIELDS,
        "hotValue": HOT_VALUE_FIELDS,
        "estimation": ESTIMATION_FIELDS,
        "topology": TOPOLOGY_FIELDS,
    }
    for section, fields in allowed.items():
        documented = {f.strip() for f in rows[section].split(",")}
        assert documented <= fields, f"spec.{section}: docs/configuration.md documents {documented - fields}"
        # every allowed field is documented (crane's misspelling's twin is named in the row's text)
        assert fields - documented <= {"maxLimitPercent"}, (
            f"spec.{section}: undocumented {fields - documented}"
        )


def test_documented_ballast_sections_example_parses_to_the_defaults() -> None:
    """The reference's block of Ballast's own sections, added to the bundled policy, loads as it says."""
    readme = CONFIGURATION.read_text()
    (block,) = [
        b for b in re.findall(r"^```yaml\n(.*?)^```", readme, flags=re.M | re.S) if b.startswith("spec:")
    ]
    extra = yaml.safe_load(block)["spec"]
    document = yaml.safe_load(POLICY_FILE.read_text())
    document["spec"].update(extra)
    policy = parse_policy(yaml.safe_dump(document))
    defaults = parse_policy(POLICY_FILE.read_text())
    assert policy.estimation == defaults.estimation
    assert policy.topology == defaults.topology and policy.scoring == defaults.scoring == "relative"
    assert policy.legacy_zone is not None and str(policy.legacy_zone) == "Asia/Shanghai"
    assert policy.resource_of("cpu_usage_avg_5m") == "cpu"


def test_dominant_resource_weight_is_a_validated_policy_field() -> None:
    """koordinator's name and bounds; a crane file without it keeps crane's ranking (0); the shipped
    policy sets what the mixed-cluster measurement chose (docs/performance.md)."""
    assert parse_policy(BASE).dominant_resource_weight == 0.0
    assert load_policy(POLICY_FILE).dominant_resource_weight == 12
    for text, weight in (("0", 0.0), ("2.5", 2.5), ("100", 100.0)):
        p = parse_policy(BASE + f"  dominantResourceWeight: {text}\n")
        assert p.dominant_resource_weight == weight
        assert p.to_json()["dominantResourceWeight"] == weight


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("-1", "-1 is out of range: must be in [0, 100]"),
        ("101", "101 is out of range: must be in [0, 100]"),
        (".nan", "out of range: must be in [0, 100]"),
        ("high", "expected a number, got 'high'"),
        ("true", "expected a number, got True"),
        ("[1]", "expected a number"),
    ],
)
def test_a_bad_dominant_resource_weight_is_refused_with_its_path(value: str, reason: str) -> None:
    with pytest.raises(PolicyError) as exc:
        parse_policy(BASE + f"  dominantResourceWeight: {value}\n", "p.yaml")
    ((path, got),) = exc.value.problems
    assert path == "spec.dominantResourceWeight" and reason in got, got
    assert str(exc.value).startswith("invalid policy p.yaml: spec.dominantResourceWeight: ")


def test_a_pressure_metric_is_a_signal_not_a_resources_usage() -> None:
    """``memory_pressure_some_avg_5m`` starts like a memory metric, and crane's naming rule read it as
    memory in use: the estimates of just-placed pods would have been added to a stall share."""
    text = BASE.replace(
        "  syncPolicy:\n",
        "  syncPolicy:\n"
        "    - {name: cpu_pressure_some_avg_5m, period: 3m}\n"
        "    - {name: memory_pressure_full_avg_5m, period: 3m}\n",
    )
    policy = parse_policy(text)
    assert policy.resource_of("cpu_pressure_some_avg_5m") is None
    assert policy.resource_of("memory_pressure_full_avg_5m") is None
    assert policy.resource_of("mem_usage_avg_5m") == "memory"
    with pytest.raises(PolicyError, match=r"metricResources\.cpu_pressure_some_avg_5m.*signal"):
        parse_policy(text + "  metricResources: {cpu_pressure_some_avg_5m: cpu}\n")
