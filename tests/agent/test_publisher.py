"""``Publisher``: the create / patch / no-op decisions, asserted on the API calls the fake API server saw."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config as k8s_config

from ballast.agent.cpuset import CPUSet
from ballast.agent.kubelet_config import KubeletSettings, parse_configz
from ballast.agent.nrt.crane import CPU_MANAGER_DISABLED_ATTRIBUTE, STATIC_KUBELET_REASON, build_nrt
from ballast.agent.nrt.publisher import (
    CONFIGZ_REFRESH_SECONDS,
    KubeletConfigFile,
    KubeletConfigz,
    NodeHandler,
    Publisher,
    PublisherMetrics,
    Result,
)
from ballast.agent.topology.model import CPUTopology
from ballast.agent.topology.sysfs import read_topology
from ballast.contract.topology_result import AWARENESS_KEY
from ballast.kube.client import MERGE_PATCH, Kube
from ballast.testing.fakekube import DEFAULT_RESOURCES, NODE_RESOURCE_TOPOLOGIES, FakeKube, make_node
from tests.agent.sysfs_fixtures import TWO_SOCKETS_HT, write_sysfs

NODE = "worker-1"
NRT_PATH = f"/apis/topology.crane.io/v1alpha1/noderesourcetopologies/{NODE}"
COLLECTION = "/apis/topology.crane.io/v1alpha1/noderesourcetopologies"
CONFIGZ = {"kubeletconfig": {"cpuManagerPolicy": "none", "kubeReserved": {"cpu": "1", "memory": "1Gi"}}}


class StaticSource:
    """A kubelet settings source returning fixed settings (tests that are not about the source)."""

    description = "test settings"

    def __init__(self, settings: KubeletSettings | None = None) -> None:
        self.value = settings or KubeletSettings()

    def settings(self) -> KubeletSettings:
        return self.value


@pytest.fixture
def topology(tmp_path: Path) -> CPUTopology:
    return read_topology(write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT))


@pytest.fixture
def kube(kubeconfig: Path) -> Iterator[Kube]:
    client = k8s_config.new_client_from_config(config_file=str(kubeconfig))
    yield Kube(client)
    client.close()


@pytest.fixture
def node(fake_kube: FakeKube) -> dict[str, Any]:
    return fake_kube.add(make_node(NODE))


def publisher(kube: Kube, topology: CPUTopology, source: Any = None, **kwargs: Any) -> Publisher:
    return Publisher(kube, NODE, topology, source or StaticSource(), **kwargs)


def writes(fake: FakeKube) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in fake.requests if r.method in ("POST", "PUT", "PATCH", "DELETE")]


def samples(metrics: PublisherMetrics, name: str) -> dict[str, float]:
    return {
        s.labels.get("result", ""): s.value
        for m in metrics.registry.collect()
        for s in m.samples
        if s.name == name
    }


# --- create, no-op, patch -----------------------------------------------------------------------------


def test_first_publish_creates_then_nothing_is_written(
    fake_kube: FakeKube, kube: Kube, topology: CPUTopology, node: dict
) -> None:
    pub = publisher(kube, topology)
    assert not pub.ready.is_set()
    assert pub.publish_once() is Result.CREATED
    assert writes(fake_kube) == [("POST", COLLECTION)]
    stored = fake_kube.get("noderesourcetopologies", NODE)
    expected = build_nrt(
        node_name=NODE, node_uid=node["metadata"]["uid"], topology=topology, kubelet=KubeletSettings()
    )
    assert {k: stored[k] for k in ("craneManagerPolicy", "zones")} == {
        k: expected[k] for k in ("craneManagerPolicy", "zones")
    }
    assert stored["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    assert pub.ready.is_set()
    assert pub.published is not None and pub.published.cpu_manager_policy == "Static"

    fake_kube.clear_requests()
    assert pub.publish_once() is Result.UNCHANGED
    assert pub.publish_once() is Result.UNCHANGED
    assert writes(fake_kube) == []
    assert [r.method for r in fake_kube.requests] == ["GET", "GET"]  # the NRT only: the Node is cached
    counts = samples(pub.metrics, "ballast_agent_nrt_publishes_total")
    assert counts == {"created": 1.0, "patched": 0.0, "unchanged": 2.0, "error": 0.0}


def test_awareness_label_flip_sends_one_merge_patch(
    fake_kube: FakeKube, kube: Kube, topology: CPUTopology, node: dict
) -> None:
    pub = publisher(kube, topology)
    pub.publish_once()
    fake_kube.clear_requests()
    flipped = fake_kube.patch("nodes", NODE, {"metadata": {"labels": {AWARENESS_KEY: "false"}}})
    assert pub.observe_node(flipped) is True
    assert pub.publish_once() is Result.PATCHED
    patches = fake_kube.find_requests("PATCH")
    assert [(r.path, r.content_type) for r in patches] == [(NRT_PATH, MERGE_PATCH)]
    assert patches[0].body == {"craneManagerPolicy": {"topologyManagerPolicy": "None"}}
    assert writes(fake_kube) == [("PATCH", NRT_PATH)]
    assert fake_kube.get("noderesourcetopologies", NODE)["craneManagerPolicy"] == {
        "cpuManagerPolicy": "Static",
        "topologyManagerPolicy": "None",
    }
    # Go ParseBool spelling of the same value: no change, no write.
    same = fake_kube.patch("nodes", NODE, {"metadata": {"labels": {AWARENESS_KEY: "F"}}})
    pub.observe_node(same)
    fake_kube.clear_requests()
    assert pub.publish_once() is Result.UNCHANGED
    assert writes(fake_kube) == []


def test_quantities_stored_in_another_form_are_not_a_change(
    fake_kube: FakeKube, kube: Kube, topology: CPUTopology, node: dict
) -> None:
    settings = parse_configz(CONFIGZ)
    pub = publisher(kube, topology, StaticSource(settings))
    pub.publish_once()
    stored = fake_kube.get("noderesourcetopologies", NODE)
    zones = copy.deepcopy(stored["zones"])
    for zone in zones:
        res = zone["resources"]
        res["capacity"]["cpu"] = f"{int(res['capacity']['cpu']) * 1000}m"
        res["allocatable"]["memory"] = f"{int(res['allocatable']['memory']) // 1024}Ki"
    fake_kube.patch(
        "noderesourcetopologies", NODE, {"zones": zones, "reserved": {"cpu": "1000m", "memory": "1024Mi"}}
    )
    assert (
        fake_kube.get("noderesourcetopologies", NODE)["zones"][0]["resources"]["capacity"]["cpu"] == "8000m"
    )
    fake_kube.clear_requests()
    assert pub.publish_once() is Result.UNCHANGED
    assert writes(fake_kube) == []


def test_a_foreign_edit_of_an_owned_field_is_repaired(
    fake_kube: FakeKube, kube: Kube, topology: CPUTopology, node: dict
) -> None:
    pub = publisher(kube, topology)
    pub.publish_once()
    fake_kube.patch("noderesourcetopologies", NODE, {"craneManagerPolicy": {"cpuManagerPolicy": "None"}})
    fake_kube.clear_requests()
    assert pub.publish_once() is Result.PATCHED
    assert fake_kube.find_requests("PATCH")[0].body == {"craneManagerPolicy": {"cpuManagerPolicy": "Static"}}
    # A deleted object is created again.
    fake_kube.delete("noderesourcetopologies", NODE)
    fake_kube.clear_requests()
    assert pub.publish_once() is Result.CREATED
    assert writes(fake_kube) == [("POST", COLLECTION)]


# --- kubelet settings ---------------------------------------------------------------------------------


def test_static_kubelet_publishes_none_and_says_why_once(
    fake_kube: FakeKube,
    kube: Kube,
    topology: CPUTopology,
    node: dict,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "cpuManagerPolicy: static\nreservedSystemCPUs: 0,8\n"
    )
    pub = publisher(kube, topology, KubeletConfigFile(config))
    with caplog.at_level(logging.INFO, logger="ballast.agent.publisher"):
        for _ in range(3):
            pub.publish_once()
    stored = fake_kube.get("noderesourcetopologies", NODE)
    assert stored["craneManagerPolicy"]["cpuManagerPolicy"] == "None"
    assert stored["attributes"] == {
        "go.crane.io/reserved-system-cpus": "0,8",
        CPU_MANAGER_DISABLED_ATTRIBUTE: STATIC_KUBELET_REASON,
    }
    why = [r for r in caplog.records if "cpuManagerPolicy is static" in r.getMessage()]
    assert len(why) == 1 and why[0].levelno == logging.WARNING
    assert str(config) in why[0].getMessage()
    assert pub.published is not None and pub.published.reserved == CPUSet([0, 8])

    # The kubelet is reconfigured (and restarted) without the static policy: the NRT follows.
    config.write_text("cpuManagerPolicy: none\nreservedSystemCPUs: 0,8\n")
    assert pub.publish_once() is Result.PATCHED
    stored = fake_kube.get("noderesourcetopologies", NODE)
    assert stored["craneManagerPolicy"]["cpuManagerPolicy"] == "Static"
    assert CPU_MANAGER_DISABLED_ATTRIBUTE not in stored["attributes"]


def test_cpu_manager_off_publishes_none_with_a_reason(
    fake_kube: FakeKube, kube: Kube, topology: CPUTopology, node: dict
) -> None:
    pub = publisher(kube, topology, cpu_manager_enabled=False)
    pub.publish_once()
    stored = fake_kube.get("noderesourcetopologies", NODE)
    assert stored["craneManagerPolicy"]["cpuManagerPolicy"] == "None"
    assert "--cpu-manager=off" in stored["attributes"][CPU_MANAGER_DISABLED_ATTRIBUTE]


def test_configz_is_read_at_start_and_then_every_ten_minutes(
    fake_kube: FakeKube, kube: Kube, topology: CPUTopology, node: dict, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    fake_kube.set_configz(NODE, CONFIGZ)
    metrics = PublisherMetrics()
    source = KubeletConfigz(kube, NODE, metrics=metrics, clock=lambda: now[0])
    pub = publisher(kube, topology, source, metrics=metrics)

    def configz_reads() -> int:
        return len(fake_kube.find_requests("GET", r"/proxy/configz$"))

    assert pub.publish_once() is Result.CREATED
    assert fake_kube.get("noderesourcetopologies", NODE)["reserved"] == {"cpu": "1", "memory": "1Gi"}
    for _ in range(5):
        now[0] += 10
        pub.publish_once()
    assert configz_reads() == 1

    # The kubelet is restarted with more reserved CPU: seen at the next refresh, not before.
    fake_kube.set_configz(NODE, {"kubeletconfig": {"kubeReserved": {"cpu": "2"}}})
    now[0] = 1000.0 + CONFIGZ_REFRESH_SECONDS - 1
    assert pub.publish_once() is Result.UNCHANGED
    now[0] = 1000.0 + CONFIGZ_REFRESH_SECONDS
    assert pub.publish_once() is Result.PATCHED
    assert configz_reads() == 2
    assert fake_kube.get("noderesourcetopologies", NODE)["reserved"] == {"cpu": "2"}

    # The kubelet is unreachable at the next refresh: the last good settings stay, retried a minute later.
    fake_kube.set_configz(NODE, None)
    now[0] += CONFIGZ_REFRESH_SECONDS
    with caplog.at_level(logging.WARNING, logger="ballast.agent.publisher"):
        assert pub.publish_once() is Result.UNCHANGED
    assert "keeping the last good ones" in caplog.text and "connection refused" in caplog.text
    now[0] += 30
    pub.publish_once()
    assert configz_reads() == 3
    now[0] += 31
    pub.publish_once()
    assert configz_reads() == 4
    reads = {
        (s.labels["source"], s.labels["result"]): s.value
        for m in metrics.registry.collect()
        for s in m.samples
        if s.name == "ballast_agent_kubelet_config_reads_total"
    }
    assert reads == {("configz", "ok"): 2.0, ("configz", "error"): 2.0}


def test_configz_unreachable_at_start_is_an_error_retried_next_time(
    fake_kube: FakeKube, kube: Kube, topology: CPUTopology, node: dict, caplog: pytest.LogCaptureFixture
) -> None:
    pub = publisher(kube, topology, KubeletConfigz(kube, NODE))
    with caplog.at_level(logging.ERROR, logger="ballast.agent.publisher"):
        assert pub.publish_once() is Result.ERROR
    assert "configz of node worker-1" in caplog.text and "503" in caplog.text
    assert writes(fake_kube) == []
    assert not pub.ready.is_set()
    fake_kube.set_configz(NODE, CONFIGZ)
    assert pub.publish_once() is Result.CREATED


def test_missing_kubelet_config_file_names_the_alternative(
    fake_kube: FakeKube,
    kube: Kube,
    topology: CPUTopology,
    node: dict,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pub = publisher(kube, topology, KubeletConfigFile(tmp_path / "nope.yaml"))
    with caplog.at_level(logging.ERROR, logger="ballast.agent.publisher"):
        assert pub.publish_once() is Result.ERROR
    assert "nope.yaml: no such file" in caplog.text and "--kubelet-configz" in caplog.text


def test_more_reserved_cpus_than_the_machine_has_is_an_error(
    fake_kube: FakeKube, kube: Kube, topology: CPUTopology, node: dict, caplog: pytest.LogCaptureFixture
) -> None:
    settings = parse_configz({"kubeletconfig": {"systemReserved": {"cpu": "17"}}})
    pub = publisher(kube, topology, StaticSource(settings))
    with caplog.at_level(logging.ERROR, logger="ballast.agent.publisher"):
        assert pub.publish_once() is Result.ERROR
    assert "kubelet reserved CPUs" in caplog.text
    assert writes(fake_kube) == []


# --- races and failures -------------------------------------------------------------------------------


def test_create_race_409_rereads_and_patches(
    fake_kube: FakeKube, kube: Kube, topology: CPUTopology, node: dict
) -> None:
    # Another writer created the object between our read (404) and our create.
    fake_kube.add(
        {
            "apiVersion": "topology.crane.io/v1alpha1",
            "kind": "NodeResourceTopology",
            "metadata": {"name": NODE},
            "craneManagerPolicy": {"cpuManagerPolicy": "None", "topologyManagerPolicy": "None"},
        }
    )
    fake_kube.fail_next("GET", f"{NRT_PATH}$", 404)
    pub = publisher(kube, topology)
    assert pub.publish_once() is Result.PATCHED
    calls = [(r.method, r.path, r.status) for r in fake_kube.requests if "noderesourcetopologies" in r.path]
    assert calls == [
        ("GET", NRT_PATH, 404),
        ("POST", COLLECTION, 409),
        ("GET", NRT_PATH, 200),
        ("PATCH", NRT_PATH, 200),
    ]
    stored = fake_kube.get("noderesourcetopologies", NODE)
    assert stored["craneManagerPolicy"]["cpuManagerPolicy"] == "Static"
    assert [z["name"] for z in stored["zones"]] == ["node0", "node1"]


def test_api_500_is_logged_counted_and_retried(
    fake_kube: FakeKube, kube: Kube, topology: CPUTopology, node: dict, caplog: pytest.LogCaptureFixture
) -> None:
    pub = publisher(kube, topology)
    fake_kube.fail_next("POST", f"{COLLECTION}$", 500, message="etcdserver: request timed out", count=2)
    with caplog.at_level(logging.DEBUG, logger="ballast.agent.publisher"):
        assert pub.publish_once() is Result.ERROR
        assert pub.publish_once() is Result.ERROR
        assert pub.publish_once() is Result.CREATED
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1  # the same failure twice is one error line; the repeat is at debug
    assert "etcdserver: request timed out" in errors[0].getMessage()
    assert "500" in errors[0].getMessage()
    assert "published again after 2 failed attempt(s)" in caplog.text
    counts = samples(pub.metrics, "ballast_agent_nrt_publishes_total")
    assert (counts["error"], counts["created"]) == (2.0, 1.0)
    assert samples(pub.metrics, "ballast_agent_nrt_last_success_timestamp_seconds")[""] > 0


def test_missing_crd_says_to_apply_the_manifest_once(
    topology: CPUTopology, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    without_crd = tuple(rt for rt in DEFAULT_RESOURCES if rt is not NODE_RESOURCE_TOPOLOGIES)
    with FakeKube(resources=without_crd) as fake:
        fake.add(make_node(NODE))
        client = k8s_config.new_client_from_config(config_file=str(fake.write_kubeconfig(tmp_path / "kc")))
        try:
            pub = publisher(Kube(client), topology)
            with caplog.at_level(logging.INFO, logger="ballast.agent.publisher"):
                for _ in range(3):
                    assert pub.publish_once() is Result.ERROR
        finally:
            client.close()
        assert [r.status for r in fake.find_requests("POST")] == [404, 404, 404]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "CRD (noderesourcetopologies.topology.crane.io) is not installed" in errors[0]
    assert "apply scheduler_config/crd-noderesourcetopology.yaml" in errors[0]


def test_missing_node_is_an_error(
    fake_kube: FakeKube, kube: Kube, topology: CPUTopology, caplog: pytest.LogCaptureFixture
) -> None:
    pub = publisher(kube, topology)
    with caplog.at_level(logging.ERROR, logger="ballast.agent.publisher"):
        assert pub.publish_once() is Result.ERROR
    assert "Node worker-1 does not exist" in caplog.text
    assert writes(fake_kube) == []


# --- the Node watch handler ---------------------------------------------------------------------------


def test_node_handler_signals_label_and_uid_changes_only(topology: CPUTopology) -> None:
    changes: list[int] = []
    pub = Publisher(None, NODE, topology, StaticSource())  # type: ignore[arg-type]
    handler = NodeHandler(pub, lambda: changes.append(1))
    base = {"metadata": {"name": NODE, "uid": "u1", "labels": {"a": "1"}}, "status": {"phase": "x"}}
    handler.replace([{"metadata": {"name": "other"}}, base], "5")
    assert len(changes) == 1
    handler.apply("MODIFIED", {**base, "status": {"phase": "y"}})  # a status update: no change
    handler.apply("MODIFIED", {"metadata": {"name": "other", "labels": {"b": "2"}}})  # someone else
    assert len(changes) == 1
    handler.apply("MODIFIED", {**base, "metadata": {**base["metadata"], "labels": {AWARENESS_KEY: "false"}}})
    assert len(changes) == 2
    handler.apply("DELETED", base)  # gone: nothing to publish until it is back
    assert len(changes) == 2
    handler.apply("ADDED", {**base, "metadata": {**base["metadata"], "uid": "u2"}})
    assert len(changes) == 3


def test_an_unexpected_exception_is_an_error_not_a_crash(
    fake_kube: FakeKube, kube: Kube, topology: CPUTopology, node: dict
) -> None:
    class Broken(StaticSource):
        def settings(self) -> KubeletSettings:
            raise RuntimeError("boom")

    pub = publisher(kube, topology, Broken())
    assert pub.publish_once() is Result.ERROR
    assert samples(pub.metrics, "ballast_agent_nrt_publishes_total")["error"] == 1.0
