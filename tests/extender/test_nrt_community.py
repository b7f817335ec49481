"""The community NRT (v1alpha2) logic: parsing, what a pod needs aligned, fit per scope, score."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ballast.contract.podfingerprint import fingerprint, xxh64
from ballast.extender.numa.community import (
    CommunityTopology,
    Malformed,
    community_demand,
    community_fit,
    community_score,
    parse_community,
)
from ballast.testing.nrt_community import GI, container, guaranteed, nrt, pod, two_zones, zone
from ballast.testing.parts import ROOT


def topo(obj: dict[str, Any]) -> CommunityTopology:
    t = parse_community(obj)
    assert isinstance(t, CommunityTopology), t
    return t


# -- parsing -------------------------------------------------------------------------------------------


def test_parse_reads_zones_in_numa_order_with_cpu_in_millicores() -> None:
    t = topo(nrt("w1", [zone(1, (8, "7500m", 3)), zone(0, (8, 8, 2))], scope="pod", fingerprint="pfp0v001ab"))
    assert [z.name for z in t.zones] == ["node-0", "node-1"]
    assert t.zones[1].allocatable["cpu"] == 7500 and t.zones[1].available["cpu"] == 3000
    assert t.zones[0].available["memory"] == 15 * GI
    assert (t.policy, t.scope, t.fingerprint, t.filters) == ("single-numa-node", "pod", "pfp0v001ab", True)


@pytest.mark.parametrize(
    ("attrs_policy", "attrs_scope", "legacy", "expected"),
    [
        ("single-numa-node", None, [], ("single-numa-node", "container")),  # the kubelet's default scope
        (None, None, ["SingleNUMANodePodLevel"], ("single-numa-node", "pod")),
        (None, None, ["SingleNUMANodeContainerLevel"], ("single-numa-node", "container")),
        (None, None, ["Restricted"], ("restricted", "container")),
        (None, None, ["BestEffortPodLevel"], ("best-effort", "pod")),
        (None, None, [], ("none", "container")),
        ("best-effort", "pod", ["SingleNUMANodeContainerLevel"], ("best-effort", "pod")),  # attributes win
        (None, "pod", ["SingleNUMANodeContainerLevel"], ("single-numa-node", "pod")),
    ],
)
def test_policy_from_attributes_then_the_deprecated_list(
    attrs_policy: str | None, attrs_scope: str | None, legacy: list[str], expected: tuple[str, str]
) -> None:
    t = topo(two_zones("w1", policy=attrs_policy, scope=attrs_scope, legacy=legacy))
    assert (t.policy, t.scope) == expected
    assert t.filters is (expected[0] == "single-numa-node")


def _broken(change: Any) -> dict[str, Any]:
    obj = two_zones("w1")
    change(obj)
    return obj


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda o: o.pop("zones"), "zones: missing"),
        (lambda o: o.update(zones=[]), "zones: missing"),
        (lambda o: o.update(zones="node-0"), "zones: missing"),
        (lambda o: o["zones"][0]["resources"][0].update(available="-1"), "negative"),
        (lambda o: o["zones"][0]["resources"][0].update(available="lots"), "available"),
        (lambda o: o["zones"][0]["resources"][0].update(capacity=None), "capacity"),
        (lambda o: o["zones"][0]["resources"][0].pop("available"), "has no available"),
        (lambda o: o["attributes"][0].update(value="single-numa"), "unknown policy"),
        (lambda o: o["attributes"][1].update(value="node"), "unknown scope"),
        (lambda o: o.update(attributes=[], topologyPolicies=["Strict"]), "unknown policy"),
        (lambda o: o["zones"][0].update(name="node0"), "node-<id>"),
        (lambda o: o["zones"][1].update(name="node-0"), "twice"),
        (lambda o: o.update(zones=[{"name": "socket-0", "type": "Socket"}]), "none of type Node"),
        (lambda o: o.update(attributes={"topologyManagerPolicy": "single-numa-node"}), "attributes"),
        (lambda o: o["zones"].append("node-2"), "zones[2]"),
    ],
)
def test_malformed_objects_are_no_information_never_an_exception(change: Any, reason: str) -> None:
    out = parse_community(_broken(change))
    assert isinstance(out, Malformed)
    assert out.node == "w1" and reason in out.reason


@given(
    st.recursive(
        st.none() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c) | st.dictionaries(st.text(max_size=8), c),
        max_leaves=20,
    )
)
@settings(max_examples=200, deadline=None)
def test_any_garbage_in_any_field_parses_or_is_malformed(garbage: Any) -> None:
    for key in ("zones", "attributes", "topologyPolicies", "metadata"):
        obj = two_zones("w1")
        obj[key] = garbage
        assert isinstance(parse_community(obj), CommunityTopology | Malformed)
    obj = two_zones("w1")
    obj["zones"][0]["resources"] = garbage
    assert isinstance(parse_community(obj), CommunityTopology | Malformed)


# -- what a pod needs aligned --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        (pod("be"), None),  # BestEffort
        (pod("burst", container("app", "2", "1Gi", limits=False)), None),  # Burstable, no device
        (pod("g-frac", container("app", "1500m", "1Gi")), {"memory": GI}),  # no exclusive CPUs
        (guaranteed("g", 6), {"cpu": 6000, "memory": GI}),
        (
            pod("burst-dev", container("app", "1", "1Gi", limits=False, more={"example.com/gpu": "1"})),
            {"example.com/gpu": 1},
        ),
        (
            pod("g-eph", container("app", "2", "1Gi", more={"ephemeral-storage": "1Gi"})),
            {"cpu": 2000, "memory": GI},
        ),
    ],
    ids=["best-effort", "burstable", "guaranteed-fractional", "guaranteed", "burstable-device", "host-level"],
)
def test_which_resources_the_kubelet_aligns(p: dict[str, Any], expected: dict[str, int] | None) -> None:
    d = community_demand(p)
    assert (None if d is None else dict(d.pod)) == expected


def test_effective_pod_request_takes_the_init_peak_or_the_apps_plus_sidecars() -> None:
    side = container("side", "1", "1Gi") | {"restartPolicy": "Always"}
    p = pod(
        "init",
        container("a", "2", "1Gi"),
        container("b", "1", "1Gi"),
        init=[container("i1", "5", "1Gi"), side, container("i2", "3", "1Gi")],
    )
    d = community_demand(p)
    assert d is not None
    assert d.pod["cpu"] == 5000  # max(5, 1 + 3, 2 + 1 + 1)
    assert [(n, k) for n, k, _ in d.containers] == [
        ("i1", "init"),
        ("side", "sidecar"),
        ("i2", "init"),
        ("a", "app"),
        ("b", "app"),
    ]


# -- fit -----------------------------------------------------------------------------------------------

NEARLY_FULL = two_zones("w1", free0=2, free1=4)


@pytest.mark.parametrize(
    ("obj", "p", "ok", "zones"),
    [
        (NEARLY_FULL, guaranteed("g6", 6), False, ()),
        (NEARLY_FULL, guaranteed("g4", 4), True, ("node-1",)),
        (NEARLY_FULL, guaranteed("g2", 2), True, ("node-0",)),  # lowest id that fits, like the kubelet
        (NEARLY_FULL, pod("be"), None, ()),
        (two_zones("w1", 2, 4, policy="best-effort"), guaranteed("g6", 6), True, ()),
        (two_zones("w1", 2, 4, policy="restricted"), guaranteed("g6", 6), True, ()),
        (two_zones("w1", 2, 4, policy="none"), guaranteed("g6", 6), True, ()),
        # container scope: each container alone fits, in different zones
        (
            NEARLY_FULL,
            pod("two", container("a", "2", "1Gi"), container("b", "4", "1Gi")),
            True,
            ("node-0", "node-1"),
        ),
        # the second container must not reuse what the first took
        (NEARLY_FULL, pod("two", container("a", "4", "1Gi"), container("b", "3", "1Gi")), False, ()),
        # pod scope: the sum must fit one zone
        (
            two_zones("w1", 2, 4, scope="pod"),
            pod("two", container("a", "2", "1Gi"), container("b", "4", "1Gi")),
            False,
            (),
        ),
        (
            two_zones("w1", 2, 8, scope="pod"),
            pod("two", container("a", "2", "1Gi"), container("b", "4", "1Gi")),
            True,
            ("node-1",),
        ),
        # an init container is checked alone and takes nothing from the app containers
        (
            NEARLY_FULL,
            pod("init", container("a", "4", "1Gi"), init=[container("i", "4", "1Gi")]),
            True,
            ("node-1",),
        ),
        (NEARLY_FULL, pod("init", container("a", "1", "1Gi"), init=[container("i", "6", "1Gi")]), False, ()),
        # memory counts for Guaranteed pods
        (
            nrt("w1", [zone(0, (8, 8, 8), (16, 15, 1)), zone(1, (8, 8, 8), (16, 15, 2))]),
            guaranteed("m", 2, "2Gi"),
            True,
            ("node-1",),
        ),
        (
            nrt("w1", [zone(0, (8, 8, 8), (16, 15, 1)), zone(1, (8, 8, 8), (16, 15, 1))]),
            guaranteed("m", 2, "2Gi"),
            False,
            (),
        ),
        # zones that report no memory: memory is not aligned there, the pod passes on CPU alone
        (nrt("w1", [zone(0, (8, 8, 8), None)]), guaranteed("m", 2, "64Gi"), True, ("node-0",)),
        # a device for a Burstable pod: checked
        (
            nrt(
                "w1",
                [
                    zone(0, (8, 8, 8), devices={"example.com/gpu": (1, 1, 0)}),
                    zone(1, (8, 8, 8), devices={"example.com/gpu": (1, 1, 1)}),
                ],
            ),
            pod("dev", container("a", "1", "1Gi", limits=False, more={"example.com/gpu": "1"})),
            True,
            ("node-1",),
        ),
        (
            nrt("w1", [zone(0, (8, 8, 8), devices={"example.com/gpu": (1, 1, 0)})]),
            pod("dev", container("a", "1", "1Gi", limits=False, more={"example.com/gpu": "1"})),
            False,
            (),
        ),
        # a device no zone reports: host-level, passes
        (
            NEARLY_FULL,
            pod("dev", container("a", "1", "1Gi", limits=False, more={"example.com/nic": "1"})),
            True,
            (),
        ),
    ],
)
def test_fit_table(obj: dict[str, Any], p: dict[str, Any], ok: bool | None, zones: tuple[str, ...]) -> None:
    d = community_demand(p)
    if ok is None:
        assert d is None
        return
    assert d is not None
    f = community_fit(topo(obj), d)
    assert f.ok is ok, f.reason
    assert tuple(z for z, _ in f.placements) == zones
    assert (f.reason is None) is ok


def test_reason_names_each_zone_and_what_it_has_free() -> None:
    f = community_fit(topo(NEARLY_FULL), community_demand(guaranteed("g6", 6, "1Gi")))
    assert f.reason == (
        "no single NUMA zone fits app container app (cpu 6, memory 1Gi): "
        "node-0 free cpu 2, memory 15Gi; node-1 free cpu 4, memory 15Gi"
    )


def test_taken_is_subtracted_from_available() -> None:
    d = community_demand(guaranteed("g4", 4))
    t = topo(two_zones("w1", 2, 8))
    assert community_fit(t, d).ok
    assert community_fit(t, d, {"node-1": {"cpu": 4000}}).ok
    f = community_fit(t, d, {"node-1": {"cpu": 5000}})
    assert not f.ok and "node-1 free cpu 3" in f.reason


# -- score ---------------------------------------------------------------------------------------------


def test_score_prefers_one_zone_then_the_emptier_zone() -> None:
    two = pod("two", container("a", "6", "1Gi"), container("b", "6", "1Gi"))
    one_zone = community_fit(topo(two_zones("a", 8, 8, scope="pod")), community_demand(guaranteed("g", 2)))
    spread = community_fit(topo(two_zones("b", 8, 8)), community_demand(two))
    assert spread.zones_used == 2 and one_zone.zones_used == 1
    assert community_score(one_zone) > community_score(spread)
    empty = community_fit(topo(two_zones("c", 8, 8)), community_demand(guaranteed("g", 2)))
    fuller = community_fit(topo(two_zones("d", 4, 4)), community_demand(guaranteed("g", 2)))
    assert community_score(empty) > community_score(fuller) > 0
    assert community_score(community_fit(topo(NEARLY_FULL), community_demand(guaranteed("g", 6)))) == 0


@given(
    free=st.lists(st.integers(0, 16), min_size=1, max_size=4),
    taken=st.lists(st.integers(0, 16), min_size=4, max_size=4),
    cpus=st.lists(st.integers(1, 8), min_size=1, max_size=3),
    scope=st.sampled_from(["container", "pod"]),
)
def test_fit_never_places_more_than_a_zone_has_free(
    free: list[int], taken: list[int], cpus: list[int], scope: str
) -> None:
    t = topo(nrt("w", [zone(i, (16, 16, f), None) for i, f in enumerate(free)], scope=scope))
    d = community_demand(pod("p", *(container(f"c{i}", str(c), "1Gi") for i, c in enumerate(cpus))))
    taken_by_zone = {f"node-{i}": {"cpu": taken[i] * 1000} for i in range(len(free))}
    with_taken = community_fit(t, d, taken_by_zone)
    if with_taken.ok:
        if scope == "pod":  # one placement: less taken can only fit as well (containers go greedily)
            assert community_fit(t, d).ok
        used: dict[str, int] = {}
        for z, w in with_taken.placements:
            used[z] = used.get(z, 0) + w["cpu"]
        for i, f in enumerate(free):
            if f"node-{i}" in used:
                assert used[f"node-{i}"] <= f * 1000 - taken[i] * 1000
        assert sum(used.values()) == sum(cpus) * 1000
    if scope == "pod":
        expect = any(f - k >= sum(cpus) for f, k in zip(free, taken, strict=False))
        assert with_taken.ok is expect


# -- the pods fingerprint ------------------------------------------------------------------------------


def test_xxh64_known_values() -> None:
    assert xxh64(b"") == 0xEF46DB3751D8E999
    assert xxh64(b"abc") == 0x44BC2CF5AD770999
    assert xxh64(b"a" * 100, 7) != xxh64(b"a" * 100)


def test_fingerprint_matches_the_reference_signature_and_ignores_order() -> None:
    pods = [("production", "jaeger-dpgjk"), ("production", "nginx-rt684"), ("production", "envoy-g9m22")]
    assert fingerprint(pods) == "pfp0v001607b76a0e9d3aeb4"  # podfingerprint's compat-tiny vector
    assert fingerprint(reversed(pods)) == fingerprint(pods)
    assert fingerprint(pods[:2]) != fingerprint(pods)


def test_the_api_coordinates_match_the_shipped_crd() -> None:

    import yaml

    from ballast.contract.nrt import COMMUNITY_GROUP, COMMUNITY_NRT_PATH, COMMUNITY_VERSION, KIND, PLURAL

    root = ROOT
    crd = yaml.safe_load((root / "scheduler_config" / "crd-noderesourcetopology-v1alpha2.yaml").read_text())
    spec = crd["spec"]
    assert (spec["group"], spec["names"]["plural"], spec["names"]["kind"], spec["scope"]) == (
        COMMUNITY_GROUP,
        PLURAL,
        KIND,
        "Cluster",
    )
    (version,) = spec["versions"]
    assert version["name"] == COMMUNITY_VERSION and version["storage"] is True
    assert f"/apis/{COMMUNITY_GROUP}/{COMMUNITY_VERSION}/{PLURAL}" == COMMUNITY_NRT_PATH
    resource = version["schema"]["openAPIV3Schema"]["properties"]["zones"]["items"]["properties"]["resources"]
    assert resource["items"]["required"] == ["name", "capacity", "allocatable", "available"]


# -- the assumed record and how a fingerprint settles it -----------------------------------------------


def test_assumed_record_expires_forgets_and_settles() -> None:
    from ballast.extender.numa.community_assumed import Assumed, AssumedRecord

    now = [100.0]
    rec = AssumedRecord(60, lambda: now[0])
    rec.assume(Assumed("a", "ns", "a", "n1", (("node-0", {"cpu": 2000}),), 100.0))
    rec.assume(Assumed("b", "ns", "b", "n1", (("node-0", {"cpu": 1000}), ("node-1", {"cpu": 3000})), 130.0))
    rec.assume(Assumed("c", "ns", "c", "n2", (("node-1", {"cpu": 4000}),), 100.0))
    assert rec.taken("n1") == {"node-0": {"cpu": 3000}, "node-1": {"cpu": 3000}}
    rec.assume(Assumed("a", "ns", "a", "n2", (("node-0", {"cpu": 2000}),), 100.0))  # moved: counted once
    assert rec.taken("n1") == {"node-0": {"cpu": 1000}, "node-1": {"cpu": 3000}} and len(rec) == 3
    now[0] = 161.0  # a and c are older than 60 s, b is not
    assert rec.taken("n2") == {} and rec.taken("n1") == {"node-0": {"cpu": 1000}, "node-1": {"cpu": 3000}}
    assert rec.settle("n1", ["b", "zzz"]) == 1 and not rec.any_on("n1") and len(rec) == 0


class _Record:
    def __init__(self, ns: str, name: str, cpu: int, limit: int, mem: int, mem_limit: int) -> None:
        from ballast.model.podinfo import PodDemand

        self.namespace, self.name = ns, name
        self.info = PodDemand(ns, name, name, False, cpu, limit, mem, mem_limit)


@pytest.mark.parametrize("method", ["all", "with-exclusive-resources"])
def test_the_fingerprint_settles_a_node_only_when_it_signs_the_known_and_assumed_pods(method: str) -> None:
    from ballast.extender.numa.community_assumed import Assumed
    from ballast.extender.numa.community_view import CommunityView

    known = [
        _Record("shop", "db", 4000, 4000, GI, GI),  # exclusive CPUs
        _Record("shop", "web", 500, 1000, GI, 2 * GI),  # Burstable: not signed by with-exclusive-resources
    ]
    view = CommunityView(lambda node: known if node == "w1" else [])
    obj = two_zones("w1")
    obj["attributes"].append({"name": "nodeTopologyPodsFingerprintMethod", "value": method})
    view.apply("ADDED", obj)
    view.assume(Assumed("u", "shop", "new", "w1", (("node-1", {"cpu": 2000}),), view.clock()))
    signed = [("shop", "db"), ("shop", "new")] + ([("shop", "web")] if method == "all" else [])

    def publish(pods: list[tuple[str, str]]) -> None:
        o = two_zones("w1")
        o["attributes"] += [
            {"name": "nodeTopologyPodsFingerprint", "value": fingerprint(pods)},
            {"name": "nodeTopologyPodsFingerprintMethod", "value": method},
        ]
        view.apply("MODIFIED", o)

    publish(signed[:1])  # the exporter has not seen the new pod yet
    assert view.taken("w1") == {"node-1": {"cpu": 2000}}
    publish(signed)
    assert view.taken("w1") == {} and view.settled == 1


def test_nodes_alike_share_an_answer_but_not_what_is_assumed_on_one_of_them() -> None:
    from ballast.extender.numa.community_assumed import Assumed
    from ballast.extender.numa.community_check import CommunityCheck
    from ballast.extender.numa.community_view import CommunityView
    from ballast.model.podinfo import read_pod
    from ballast.model.policy import load_policy
    from ballast.model.policy_store import PolicyStore
    from ballast.testing.parts import POLICY_FILE

    view = CommunityView(lambda _n: ())
    view.replace([two_zones(n, 2, 4) for n in ("a", "b", "c")] + [two_zones("d", 2, 8)], "1")
    view.assume(Assumed("u", "ns", "p", "b", (("node-1", {"cpu": 1000}),), view.clock()))
    check = CommunityCheck(PolicyStore(load_policy(POLICY_FILE)), view, lambda _n: None, lambda _c: None)
    p = guaranteed("g", 4)
    demand = check.demand(read_pod.record(p))
    assert demand is not None
    failed: dict[str, str] = {}
    assert check.filter(demand, ["a", "b", "c", "d"], failed) == {"b"}
    assert "node-1 free cpu 3" in failed["b"]
    hosts = ["a", "b", "c", "d"]
    scores = [0] * len(hosts)
    assert check.scores(demand, hosts, scores)
    by = dict(zip(hosts, scores, strict=True))
    assert by["a"] == by["c"] and by["b"] == 0 and by["d"] > by["a"]
