"""The harness itself: the real kube-scheduler binds pods to API-only nodes, and restarts cleanly."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from ballast.testing.controlplane import (
    ControlPlane,
    bound_pods,
    create_nodes,
    node_body,
    pod_body,
    wait_bound,
)

pytestmark = pytest.mark.integration


def test_the_default_scheduler_binds_pods_and_respects_allocatable(cluster: ControlPlane) -> None:
    core = cluster.core()
    create_nodes(core, [node_body("small", cpu="1"), node_body("big", cpu="4")])
    cluster.start_scheduler({"profiles": [{"schedulerName": "default-scheduler"}]})
    core.create_namespaced_pod("default", pod_body("needs-two", requests={"cpu": "2"}))
    assert wait_bound(core, ["needs-two"]) == {"needs-two": "big"}
    assert "big" in cluster.kubectl("get", "pod", "needs-two", "-o", "jsonpath={.spec.nodeName}")


def test_a_pod_waits_while_no_scheduler_runs_and_binds_after_a_restart(cluster: ControlPlane) -> None:
    core = cluster.core()
    create_nodes(core, [node_body("only")])
    cluster.start_scheduler({"profiles": [{"schedulerName": "default-scheduler"}]})
    cluster.stop_scheduler()
    core.create_namespaced_pod("default", pod_body("late"))
    assert bound_pods(core) == {}
    cluster.start_scheduler({"profiles": [{"schedulerName": "default-scheduler"}]})
    assert wait_bound(core, ["late"]) == {"late": "only"}


def test_a_watch_without_a_resource_version_starts_at_once(cluster: ControlPlane) -> None:
    """kube-apiserver v1.36 answers a watch without a resourceVersion from its watch cache only once etcd
    has confirmed the cache is current. Debian's etcd 3.4 cannot be asked for that confirmation, only send
    it every ``--experimental-watch-progress-notify-interval``: without the flag such a watch waits 3 s and
    ends with "Too large resource version" instead of an event."""
    started = time.monotonic()
    url = f"{cluster.server_url}/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=10"
    with urllib.request.urlopen(url, context=cluster.ssl_context(), timeout=30) as watch:
        waited = time.monotonic() - started
        cluster.core().create_namespaced_pod("default", pod_body("watched"))
        event = json.loads(watch.readline())
    assert event["type"] == "ADDED", event
    assert event["object"]["metadata"]["name"] == "watched"
    assert waited < 2.5, f"the watch took {waited:.1f} s to start"
