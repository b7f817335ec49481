"""The agent trusts a topology result only when Ballast's bind wrote it for that pod (issue 12, item 3).

Before, the agent honoured any result on a pod whose ``schedulerName`` named Ballast's scheduler: a user
who may create pods set that name, ``spec.nodeName`` (no scheduler ran) and a forged result, and got the
zones it asked for. With a result key the extender seals each result it writes to the pod's UID and node,
and the agent and the extender's zone accounting ignore results whose seal does not verify.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ballast.agent.cpumanager.policy_static import StaticPolicy
from ballast.agent.cpuset import CPUSet
from ballast.cli import main as ballast_main
from ballast.contract.pod import parse_pod
from ballast.contract.seal import SEAL_ANNOTATION, SealKeyError, load_key, seal, verify
from ballast.contract.topology_result import render_topology_result
from ballast.extender.main import create_app
from ballast.kube.client import Kube, load_api_client
from ballast.model.policy import load_policy
from ballast.testing.cri_fake import SCHEDULER, container, pod
from ballast.testing.fakekube import make_nrt
from ballast.testing.parts import POLICY_FILE, ROOT, wait_for
from tests.agent.kubelet_topologies import DUAL_SOCKET_HT
from tests.extender.test_numa import N1, guaranteed, node, zones

KEY = b"k" * 32
RESULT = [{"name": "node1", "type": "Node", "resources": {"capacity": {"cpu": "2"}}}]


def agent(key: bytes | None) -> StaticPolicy:
    return StaticPolicy(DUAL_SOCKET_HT, CPUSet.of(0, 6), allowed_schedulers=[SCHEDULER], result_key=key)


def forged(uid: str = "u-forged", with_seal: str | None = None) -> dict:
    """A pod placed directly on the node (spec.nodeName), naming Ballast's scheduler, with its own result."""
    p = pod("forger", [container("app", "2")], uid=uid, result=RESULT)
    if with_seal is not None:
        p["metadata"]["annotations"][SEAL_ANNOTATION] = with_seal
    return p


def test_seal_covers_uid_node_and_result() -> None:
    s = seal(KEY, "u1", "n1", "[1]")
    assert verify(KEY, "u1", "n1", "[1]", s)
    for uid, node_, result in (("u2", "n1", "[1]"), ("u1", "n2", "[1]"), ("u1", "n1", "[2]")):
        assert not verify(KEY, uid, node_, result, s)
    assert not verify(b"o" * 32, "u1", "n1", "[1]", s)
    assert not verify(KEY, "u1", "n1", "[1]", None)


def test_without_a_key_the_agent_trusts_schedulername_alone() -> None:
    """The residual risk documented in docs/security.md: without a key a forged result is honoured."""
    d = agent(None).decide(parse_pod(forged()))
    assert d.zones == ((1, 2),) and d.rejected is None


def test_with_a_key_a_forged_result_is_ignored() -> None:
    d = agent(KEY).decide(parse_pod(forged()))
    assert d.zones is None and d.rejected is not None and d.rejected[0] == "unsealed"
    assert d.pins  # the pod still gets its CPUs, from the whole machine


def test_a_seal_copied_from_another_pod_does_not_verify() -> None:
    p = forged()
    text = p["metadata"]["annotations"]["topology.crane.io/topology-result"]
    node_ = p["spec"]["nodeName"]
    other = seal(KEY, "u-other", node_, text)
    assert agent(KEY).decide(parse_pod(forged(with_seal=other))).rejected[0] == "unsealed"
    own = seal(KEY, "u-forged", node_, text)
    assert agent(KEY).decide(parse_pod(forged(with_seal=own))).zones == ((1, 2),)


def test_load_key_refuses_short_or_missing_keys(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_bytes(b"abc\n")
    with pytest.raises(SealKeyError, match="at least 32"):
        load_key(short)
    with pytest.raises(SealKeyError, match="cannot read"):
        load_key(tmp_path / "missing")
    good = tmp_path / "good"
    good.write_bytes(KEY + b"\n")
    assert load_key(good) == KEY


def test_extender_refuses_a_bad_key_file(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_bytes(b"abc")
    code = ballast_main(["extender", "--policy", str(POLICY_FILE), "--result-key-file", str(short)])
    assert code == 2


@pytest.mark.parametrize("unreadable", ["missing", "a-directory"])
def test_extender_refuses_to_start_with_an_unreadable_key_rather_than_run_unsealed(
    tmp_path: Path, unreadable: str
) -> None:
    """The shipped manifests pass --result-key-file; a Secret that is not there must stop the extender,
    not leave it serving unsealed results (it exits before it listens)."""
    (tmp_path / "a-directory").mkdir()
    path = tmp_path / unreadable
    done = subprocess.run(
        [sys.executable, "-m", "ballast", "extender", "--policy", str(POLICY_FILE), "--port", "0",
         "--result-key-file", str(path)],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"cannot read the result key file {path}" in done.stderr
    assert "listening on" not in done.stderr + done.stdout


@pytest.fixture
def sealed(fake_kube, kubeconfig: Path):
    fake_kube.add(node(N1))
    fake_kube.add(make_nrt(N1, zones=zones(8, 8)))
    kube = Kube(load_api_client(str(kubeconfig)), timeout=3.0)
    app = create_app(load_policy(POLICY_FILE), kube=kube, policy_poll_seconds=0, result_key=KEY)
    with TestClient(app) as client:
        assert app.state.services.cache.wait_synced(10)
        yield client, app


def test_bind_seals_the_result_and_the_agent_accepts_it(sealed, fake_kube) -> None:
    client, app = sealed
    uid = fake_kube.add(guaranteed("kafka", 4))["metadata"]["uid"]
    client.post("/filter", json={"Pod": fake_kube.get("pods", "kafka", namespace="shop"), "NodeNames": [N1]})
    r = client.post("/bind", json={"PodName": "kafka", "PodNamespace": "shop", "PodUID": uid, "Node": N1})
    assert r.json() == {"Error": ""}
    stored = fake_kube.get("pods", "kafka", namespace="shop")
    assert SEAL_ANNOTATION in stored["metadata"]["annotations"]
    topo = DUAL_SOCKET_HT
    decision = StaticPolicy(topo, CPUSet.of(0, 6), allowed_schedulers=[SCHEDULER], result_key=KEY).decide(
        parse_pod(stored)
    )
    assert decision.zones == ((0, 4),) and decision.rejected is None
    cache = app.state.services.cache
    wait_for(lambda: cache.zone_usage(N1).cpu_milli.get("node0") == 4000 and uid not in cache.assumed)


def test_with_a_key_a_forged_result_takes_nothing_from_a_zone(sealed, fake_kube) -> None:
    _, app = sealed
    p = guaranteed("forger", 4)
    p["metadata"]["annotations"]["topology.crane.io/topology-result"] = render_topology_result(
        (("node0", 4, 0),)
    )
    p["spec"]["nodeName"] = N1
    p["status"] = {"phase": "Running"}
    fake_kube.add(p)
    cache = app.state.services.cache
    wait_for(lambda: cache.pods_on(N1), what="the forged pod in the cache")
    assert cache.zone_usage(N1).cpu_milli.get("node0", 0) == 0
