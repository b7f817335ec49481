"""``spec.rebalance``: the contract's shape, defaults, and every refusal with its field path."""

from __future__ import annotations

import pytest
import yaml

from ballast.model.policy import PolicyError, parse_policy
from ballast.model.rebalance_policy import Limits, rebalance_settings
from ballast.testing.parts import POLICY_FILE
from tests.rebalancer.helpers import BASE, CPU


def settings_of(rebalance: object):
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    doc["spec"]["rebalance"] = rebalance
    return rebalance_settings(parse_policy(yaml.safe_dump(doc), "p.yaml"))


def test_the_issue_example_parses_with_the_defaults() -> None:
    text = (
        POLICY_FILE.read_text()
        + """
  rebalance:
    thresholds:
      - {name: cpu_usage_avg_5m, high: 0.80, low: 0.45}
      - {name: mem_usage_avg_5m, high: 0.85, low: 0.50}
    consecutiveAbnormal: 5
    consecutiveNormal: 3
"""
    )
    s = rebalance_settings(parse_policy(text))
    assert s is not None
    assert [(t.name, t.high, t.low, t.resource) for t in s.thresholds] == [
        ("cpu_usage_avg_5m", 0.80, 0.45, "cpu"),
        ("mem_usage_avg_5m", 0.85, 0.50, "memory"),
    ]
    assert (s.consecutive_abnormal, s.consecutive_normal) == (5, 3)
    assert s.limits == Limits() and s.limits.per_node == 2 and s.limits.workload_window == 300
    assert s.excluded_namespaces == {"kube-system"} and s.evict_local_storage is False
    # the freshness rule is the extender's: period 3m + 5m
    assert s.thresholds[0].valid_for == 480


def test_no_section_means_idle_and_the_other_programs_ignore_it() -> None:
    assert rebalance_settings(parse_policy(POLICY_FILE.read_text())) is None
    # a section the rebalancer would refuse still loads as a policy: the extender and annotator ignore it
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    doc["spec"]["rebalance"] = {"thresholds": "nonsense"}
    policy = parse_policy(yaml.safe_dump(doc))
    with pytest.raises(PolicyError):
        rebalance_settings(policy)


OK = [{"name": CPU, "high": 0.9, "low": 0.2}]
R = "spec.rebalance"


def one(**kw: object) -> list[dict[str, object]]:
    return [{"name": CPU, **kw}]


@pytest.mark.parametrize(
    "rebalance,path,words",
    [
        ({"thresholds": one(high=0.5, low=0.6)}, f"{R}.thresholds[0].low", "below high"),
        ({"thresholds": one(high=0.5, low=0.5)}, f"{R}.thresholds[0].low", "below high"),
        ({"thresholds": one(high=1.2, low=0.3)}, f"{R}.thresholds[0].high", "(0, 1]"),
        ({"thresholds": one(high=0.9, low=0)}, f"{R}.thresholds[0].low", "(0, 1]"),
        ({"thresholds": [{"name": "gpu", "high": 0.9, "low": 0.2}]}, f"{R}.thresholds[0].name", "syncPolicy"),
        ({"thresholds": one(high="0.9", low=0.2)}, f"{R}.thresholds[0].high", "number"),
        ({"thresholds": one(hihg=0.9, low=0.2)}, f"{R}.thresholds[0].hihg", "unknown"),
        ({"thresholds": []}, f"{R}.thresholds", "non-empty"),
        ({"thresholds": one(high=0.9)}, f"{R}.thresholds", "cool"),
        ({"thresholds": OK, "consecutiveAbnormal": 0}, f"{R}.consecutiveAbnormal", "at least 1"),
        ({"thresholds": OK, "limits": {"perNode": -1}}, f"{R}.limits.perNode", "at least 1"),
        ({"thresholds": OK, "limits": {"workloadWindow": "soon"}}, f"{R}.limits.workloadWindow", ""),
        (
            {"thresholds": OK, "limits": {"evictionsPerSecond": 0}},
            f"{R}.limits.evictionsPerSecond",
            "(0, 1000]",
        ),
        ({"thresholds": OK, "excludedNamespaces": "kube-system"}, f"{R}.excludedNamespaces", "list"),
        ({"thresholds": OK, "evictLocalStorage": "yes"}, f"{R}.evictLocalStorage", "true or false"),
        ({"thresholds": OK, "dryRun": True}, f"{R}.dryRun", "unknown"),
        ([1], R, "mapping"),
    ],
)
def test_refusals_name_the_field(rebalance: object, path: str, words: str) -> None:
    with pytest.raises(PolicyError) as err:
        settings_of(rebalance)
    paths = [p for p, _ in err.value.problems]
    assert path in paths, err.value.problems
    assert words in dict(err.value.problems)[path]
    assert "p.yaml" in str(err.value)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(PolicyError) as err:
        settings_of(
            {
                "thresholds": [{"name": CPU, "high": 2, "low": 0.1}],
                "consecutiveNormal": "x",
                "limits": {"perCycle": 0},
            }
        )
    assert {p for p, _ in err.value.problems} >= {
        "spec.rebalance.thresholds[0].high",
        "spec.rebalance.consecutiveNormal",
        "spec.rebalance.limits.perCycle",
    }


def test_limits_are_read() -> None:
    s = settings_of(
        {
            "thresholds": [{"name": CPU, "high": 0.9, "low": 0.2}],
            "excludedNamespaces": ["kube-system", "monitoring"],
            "evictLocalStorage": True,
            "limits": {"perNode": 1, "perNamespace": 3, "perCycle": 4, "perWorkload": 2,
                       "workloadWindow": "10m", "evictionsPerSecond": 0.5},
        }
    )  # fmt: skip
    assert s.limits == Limits(1, 3, 4, 2, 600.0, 0.5)
    assert s.excluded_namespaces == {"kube-system", "monitoring"} and s.evict_local_storage


def test_the_documented_example_gives_the_documented_defaults() -> None:
    """docs/rebalancer.md's policy block says its limits are the defaults: it parses to exactly them."""
    import re

    from ballast.testing.parts import ROOT

    text = (ROOT / "docs" / "rebalancer.md").read_text()
    (block,) = [b for b in re.findall(r"^```yaml\n(.*?)^```", text, flags=re.M | re.S) if "rebalance:" in b]
    s = rebalance_settings(parse_policy(block))
    assert s is not None and s.limits == Limits()
    assert (s.consecutive_abnormal, s.consecutive_normal, s.evict_local_storage) == (5, 3, False)
    assert s.excluded_namespaces == {"kube-system"}
