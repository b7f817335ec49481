"""Shadow mode under the real kube-scheduler v1.36.2, wired as the shipped scheduler-config-node-cache.yaml
says: placement is the scheduler's own (a node Ballast would reject still receives its share of pods), while
the counters record what Ballast would have done; then the operator flips the policy to enforce, without a
restart, and the same node gets nothing more.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ballast.testing.controlplane import (
    ControlPlane,
    bound_pods,
    create_nodes,
    node_body,
    scraped,
    spawn,
    wait_bound,
    wait_until,
)
from tests.cluster.test_extender_e2e import CRD, POLICY, Extender, create_pods, load, scheduler_config

pytestmark = pytest.mark.integration


class ShadowExtender(Extender):
    """The e2e extender with its own policy file, polled every second so a flip needs no restart."""

    def __init__(self, cp: ControlPlane, policy: Path) -> None:
        super().__init__(cp)
        self.policy = policy

    def start(self) -> None:
        assert self.cp.workdir
        self.starts += 1
        argv = [sys.executable, "-m", "ballast", "extender",
                "--host", "127.0.0.1", "--port", str(self.port), "--policy", str(self.policy),
                "--kubeconfig", str(self.cp.kubeconfig), "--policy-poll", "1"]  # fmt: skip
        self.server = spawn(f"ballast-shadow-{self.starts}", argv, self.cp.workdir, env=dict(os.environ))

        def ready() -> bool:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=5) as resp:
                return resp.status == 200

        wait_until(ready, self.server, "ballast extender /readyz")

    def sample(self, name: str, **labels: str) -> float:
        return scraped(self.url, name, **labels)

    def mode(self) -> str:
        with urllib.request.urlopen(f"{self.url}/nodes", timeout=5) as resp:
            return json.loads(resp.read())["mode"]


@pytest.fixture
def shadow(cluster: ControlPlane, tmp_path: Path) -> Iterator[ShadowExtender]:
    cluster.kubectl("apply", "-f", str(CRD))
    cluster.kubectl("wait", "--for", "condition=Established", "--timeout", "120s", "-f", str(CRD))
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.read_text().replace("spec:\n", "spec:\n  mode: shadow\n", 1))
    ext = ShadowExtender(cluster, policy)
    ext.start()
    try:
        cluster.start_scheduler(scheduler_config(ext.url))
        yield ext
    finally:
        cluster.stop_scheduler()
        ext.stop()


def test_shadow_placement_is_the_schedulers_own_and_the_counters_say_what_ballast_would_do(
    cluster: ControlPlane, shadow: ShadowExtender
) -> None:
    core = cluster.core()
    assert shadow.mode() == "shadow"
    nodes = ["hot", "cool-0", "cool-1", "cool-2"]
    create_nodes(
        core,
        [node_body("hot", annotations=load(0.90))]
        + [node_body(n, annotations=load(0.10)) for n in nodes[1:]],
    )
    names = [f"web-{i}" for i in range(16)]
    create_pods(core, names, requests={"cpu": "100m", "memory": "64Mi"})
    placed = wait_bound(core, names)
    per_node = Counter(placed.values())
    # The scheduler's own plugins spread equal pods over equal nodes: the node Ballast would reject gets
    # its share (a quarter, give or take the scheduler's tie-breaks), as it would without Ballast.
    assert per_node["hot"] >= 2, per_node
    # ... and the counters record what Ballast would have done. kube-scheduler may reuse one pod's
    # answers for the next identical pod (opportunistic batching), so count against the calls it made:
    # every filter call carried the hot node, and Ballast would have rejected it once per call.
    filters = shadow.sample("ballast_extender_requests_total", verb="filter", code="200")
    prioritizes = shadow.sample("ballast_extender_requests_total", verb="prioritize", code="200")
    print(f"placed {dict(per_node)}, {filters:g} filter and {prioritizes:g} prioritize calls")
    assert filters >= 1 and prioritizes >= 1
    would = shadow.sample("ballast_extender_shadow_would_reject_total", metric="cpu_usage_avg_5m")
    assert would == filters
    assert shadow.sample("ballast_extender_nodes_rejected_total") == 0
    # every pod Ballast scored is compared once it is bound (a pod scored twice, after a failed attempt,
    # is compared once)
    wait_until(
        lambda: shadow.sample("ballast_extender_shadow_choices_total") in (prioritizes, len(names)),
        None,
        "every scored pod compared with Ballast's choice",
    )
    choices = shadow.sample("ballast_extender_shadow_choices_total")
    assert shadow.sample("ballast_extender_shadow_chosen_load_excess_count") == choices
    disagreed = shadow.sample("ballast_extender_shadow_choices_total", agreed="false")
    excess = shadow.sample("ballast_extender_shadow_chosen_load_excess_sum")
    # a disagreement is a pod on the hot node (0.9 against 0.1: some 0.8 more load) or a cool node other
    # than Ballast's favourite (the same measured load: an excess of an estimate or so)
    assert excess <= disagreed * 0.85
    if choices == len(names):  # every pod was scored: each one on the hot node disagreed
        assert disagreed >= per_node["hot"] and excess >= per_node["hot"] * 0.5

    # The operator flips to enforce (no restart): new pods avoid the hot node.
    shadow.policy.write_text(shadow.policy.read_text().replace("mode: shadow", "mode: enforce"))
    wait_until(lambda: shadow.mode() == "enforce", None, "the extender reloads the policy")
    more = [f"api-{i}" for i in range(6)]
    create_pods(core, more, requests={"cpu": "100m", "memory": "64Mi"})
    placed_after = wait_bound(core, more)
    assert "hot" not in placed_after.values(), placed_after
    assert Counter(bound_pods(core).values())["hot"] == per_node["hot"]
