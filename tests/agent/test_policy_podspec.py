"""Pod eligibility as the kubelet computes it: QoS from the spec, whole-CPU containers, topology results."""

from __future__ import annotations

import json

import pytest

from ballast.contract.pod import ContainerKind, QOSClass, parse_pod
from ballast.contract.topology_result import TopologyResultError, parse_topology_result
from ballast.testing.cri_fake import container, pod, zones


def _qos(p: dict) -> QOSClass:
    return parse_pod(p).qos


@pytest.mark.parametrize(
    ("containers", "init", "expected"),
    [
        ([container("a", "2", "1Gi")], [], QOSClass.GUARANTEED),
        ([container("a", "2", "1Gi"), container("b", "500m", "64Mi")], [], QOSClass.GUARANTEED),
        ([container("a", "2", "1Gi", request_cpu="1")], [], QOSClass.BURSTABLE),
        ([container("a", "2", None)], [], QOSClass.BURSTABLE),  # no memory limit
        ([container("a", None, None)], [], QOSClass.BEST_EFFORT),
        ([container("a", "0", "0")], [], QOSClass.BEST_EFFORT),  # zero quantities are ignored
        # An init container without limits makes the pod Burstable, as the kubelet counts init containers.
        ([container("a", "2", "1Gi")], [container("i", "1", None)], QOSClass.BURSTABLE),
        ([container("a", "2", "1Gi")], [container("i", "4", "1Gi")], QOSClass.GUARANTEED),
        ([container("a", "2000m", "1Gi")], [], QOSClass.GUARANTEED),
    ],
)
def test_qos_from_spec(containers: list, init: list, expected: QOSClass) -> None:
    assert _qos(pod("p", containers, init=init)) is expected


def test_status_qos_class_is_not_trusted() -> None:
    p = pod("p", [container("a", "2", "1Gi", request_cpu="1")])
    p["status"]["qosClass"] = "Guaranteed"
    info = parse_pod(p)
    assert info.qos is QOSClass.BURSTABLE
    assert info.exclusive_cpus == 0


def test_pod_level_resources_decide_qos() -> None:
    p = pod("p", [{"name": "a", "image": "x"}])
    p["spec"]["resources"] = {
        "requests": {"cpu": "2", "memory": "1Gi"},
        "limits": {"cpu": "2", "memory": "1Gi"},
    }
    assert _qos(p) is QOSClass.GUARANTEED
    p["spec"]["resources"]["requests"]["cpu"] = "1"
    assert _qos(p) is QOSClass.BURSTABLE


@pytest.mark.parametrize(
    ("cpu", "expected"), [("2", 2), ("2000m", 2), ("1500m", 0), ("1.5", 0), ("0.5", 0), ("3e0", 3)]
)
def test_exclusive_cpus_need_a_whole_number(cpu: str, expected: int) -> None:
    info = parse_pod(pod("p", [container("a", cpu, "1Gi")]))
    assert info.qos is QOSClass.GUARANTEED
    assert info.containers[0].exclusive_cpus == expected


def test_pod_guaranteed_cpus_with_init_and_sidecars() -> None:
    # kubelet podGuaranteedCPUs: max(init peak incl. earlier sidecars, apps + sidecars)
    info = parse_pod(
        pod(
            "p",
            [container("app1", "2", "1Gi"), container("app2", "1", "1Gi")],
            init=[
                container("init1", "5", "1Gi"),
                container("sidecar", "1", "1Gi", restart_policy="Always"),
                container("init2", "5", "1Gi"),
            ],
        )
    )
    kinds = [(c.name, c.kind) for c in info.containers]
    assert kinds == [
        ("init1", ContainerKind.INIT),
        ("sidecar", ContainerKind.SIDECAR),
        ("init2", ContainerKind.INIT),
        ("app1", ContainerKind.APP),
        ("app2", ContainerKind.APP),
    ]
    assert info.exclusive_cpus == 6  # init2 (5) + the sidecar (1) started before it
    info = parse_pod(pod("p", [container("a", "4", "1Gi")], init=[container("i", "2", "1Gi")]))
    assert info.exclusive_cpus == 4


def test_statuses_strip_the_runtime_prefix() -> None:
    p = pod("p", [container("a"), container("b")], uid="11111111-2222-3333-4444-555555555555")
    p["status"]["containerStatuses"][1]["state"] = {"terminated": {"exitCode": 1}}
    info = parse_pod(p)
    a = info.statuses["a"]
    assert (a.runtime, a.container_id, a.running) == ("containerd", "111111112222a0", True)
    assert not info.statuses["b"].running


def test_malformed_pod_never_raises() -> None:
    for bad in [
        {},
        {"metadata": 3},
        {"spec": {"containers": "x"}},
        {"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "lots"}}}]}},
    ]:
        info = parse_pod(bad)
        assert all(c.exclusive_cpus == 0 for c in info.containers)
    info = parse_pod(
        {"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "lots", "memory": "1Gi"}}}]}}
    )
    assert info.problems and "lots" in info.problems[0]


def test_topology_result_parses() -> None:
    assert parse_topology_result(json.dumps(zones(node1=2, node0=3))).cpus == ((0, 3), (1, 2))
    text = '[{"name":"node0","type":"Node","resources":{"capacity":{"cpu":"4"}}}]'
    assert parse_topology_result(text).cpus == ((0, 4),)
    # memory in capacity is fine, a zone with 0 CPUs is dropped
    text = (
        '[{"name":"node0","type":"Node","resources":{"capacity":{"cpu":"2","memory":"1Gi"}}},'
        '{"name":"node1","type":"Node","resources":{"capacity":{"cpu":"0"}}}]'
    )
    assert parse_topology_result(text).cpus == ((0, 2),)
    assert parse_topology_result(text).memory == {0: 2**30}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not JSON"),
        ('{"name":"node0"}', "non-empty JSON list"),
        ("[]", "non-empty JSON list"),
        ('[{"name":"x","type":"Node","resources":{"capacity":{"cpu":"1"}}}]', "'x' is not 'node<N>'"),
        ('[{"name":"nod","type":"Node","resources":{"capacity":{"cpu":"1"}}}]', "is not 'node<N>'"),
        ('[{"name":"node-1","type":"Node","resources":{"capacity":{"cpu":"1"}}}]', "is not 'node<N>'"),
        ('[{"name":7,"type":"Node","resources":{"capacity":{"cpu":"1"}}}]', "is not 'node<N>'"),
        ('[{"name":"node0","type":"Socket","resources":{"capacity":{"cpu":"1"}}}]', "is not 'Node'"),
        ('[{"name":"node0","type":"Node","resources":{"capacity":{"cpu":"1.5"}}}]', "whole number"),
        ('[{"name":"node0","type":"Node","resources":{"capacity":{"cpu":"-1"}}}]', "whole number"),
        ('[{"name":"node0","type":"Node","resources":{"capacity":{"cpu":"lots"}}}]', "lots"),
        ('[{"name":"node0","type":"Node"}]', "no resources.capacity.cpu"),
        ('[{"name":"node0","type":"Node","resources":{"capacity":{"cpu":"1","memory":"lots"}}}]', "lots"),
        (
            '[{"name":"node0","type":"Node","resources":{"capacity":{"cpu":"1","memory":"-1Gi"}}}]',
            "whole number of bytes",
        ),
        (
            '[{"name":"node0","type":"Node","resources":{"capacity":{"cpu":"1"}}},'
            '{"name":"node0","type":"Node","resources":{"capacity":{"cpu":"1"}}}]',
            "listed twice",
        ),
        ('[{"name":"node0","type":"Node","resources":{"capacity":{"cpu":"0"}}}]', "no zone has any CPU"),
        ("[3]", "expected an object"),
        ("[" + ",".join(['{"name":"node0"}'] * 5000) + "]", "bytes long"),
    ],
)
def test_topology_result_rejects(text: str, message: str) -> None:
    with pytest.raises(TopologyResultError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse_topology_result(text)


def test_bad_annotation_is_recorded_not_raised() -> None:
    info = parse_pod(pod("p", [container("a", "2", "1Gi")], result='[{"name":"x"}]'))
    assert info.topology_result is None
    assert info.topology_result_error is not None and "'x'" in info.topology_result_error
