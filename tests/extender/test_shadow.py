"""Shadow mode: every verb works out its real answer and records it, then answers as if Ballast's load rules
were absent. Unit level here; ``tests/cluster/test_shadow_e2e.py`` runs it under the real kube-scheduler."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient

from ballast.cli import main
from ballast.contract.annotations import format_load
from ballast.extender.encode import ScoreAnswers
from ballast.extender.extender import Extender
from ballast.extender.main import create_app
from ballast.extender.metrics import ExtenderMetrics
from ballast.extender.shadow import MAX_FAVOURED, TTL_SECONDS, ShadowBook
from ballast.extender.wire import ExtenderArgs
from ballast.kube.client import Kube, load_api_client
from ballast.model.ledger import Ledger
from ballast.model.nodestate import parse_node
from ballast.model.policy import load_policy
from ballast.model.policy_store import PolicyStore
from ballast.testing.node_source import StaticSource
from ballast.testing.parts import POLICY_FILE, wait_for
from tests.conftest import CAPTURE_TIME
from tests.extender.test_cluster import HOT, IDLE, _bind, _metric, clean, fixture_nodes, pod_obj

NOW = 1_800_000_000.0
ENFORCE = load_policy(POLICY_FILE)
SHADOW = dataclasses.replace(ENFORCE, mode="shadow")


def node(name: str, cpu: float) -> dict:
    ann = {m: format_load(cpu if m.startswith("cpu") else 0.2, NOW - 30) for m in ENFORCE.sync_periods}
    return {
        "metadata": {"name": name, "annotations": ann},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}},
    }


def pod(uid: str = "u1") -> dict:
    return {
        "metadata": {"name": uid, "namespace": "ns", "uid": uid},
        "spec": {"containers": [{"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
    }


def extender(policy) -> tuple[Extender, ExtenderMetrics, StaticSource]:
    loads = {n: parse_node(node(n, v), policy, NOW) for n, v in (("cool", 0.1), ("warm", 0.4), ("hot", 0.9))}
    source = StaticSource(loads)
    metrics = ExtenderMetrics()
    ext = Extender(PolicyStore(policy), metrics, source, Ledger(policy, lambda: NOW), lambda: NOW)
    return ext, metrics, source


def sample(metrics: ExtenderMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_enforce_rejects_and_shadow_passes_while_counting() -> None:
    ext, metrics, _ = extender(ENFORCE)
    names = ["cool", "warm", "hot"]
    out = ext.filter(ExtenderArgs(pod(), None, names))
    assert out["NodeNames"] == ["cool", "warm"] and list(out["FailedNodes"]) == ["hot"]
    assert sample(metrics, "ballast_extender_nodes_rejected_total", metric="cpu_usage_avg_5m") == 1
    assert sample(metrics, "ballast_extender_shadow_would_reject_total", metric="cpu_usage_avg_5m") == 0

    ext, metrics, _ = extender(SHADOW)
    out = ext.filter(ExtenderArgs(pod(), None, names))
    assert out["NodeNames"] == names and out["FailedNodes"] == {}
    assert sample(metrics, "ballast_extender_nodes_rejected_total", metric="cpu_usage_avg_5m") == 0
    assert sample(metrics, "ballast_extender_shadow_would_reject_total", metric="cpu_usage_avg_5m") == 1
    assert sample(metrics, "ballast_extender_shadow_mode") == 1


def test_shadow_prioritize_answers_one_score_and_holds_nothing() -> None:
    ext, _, _ = extender(ENFORCE)
    real = ext.prioritize(ExtenderArgs(pod(), None, ["hot", "warm", "cool"])).entries()
    # the shipped ranking, with its dominant-resource term: cool's standing memory (0.2) against warm's
    # and hot's cpu (0.4, 0.9); 4 for warm by the weighted mean alone
    assert [e["Score"] for e in real] == [0, 5, 10]
    assert ext.ledger.known("u1").node == "cool"  # enforce: the estimate is held on the favourite

    ext, _, _ = extender(SHADOW)
    for encoded in (False, True):
        answer = ext.prioritize(ExtenderArgs(pod(), None, ["hot", "warm", "cool"]))
        out = orjson.loads(ScoreAnswers(ext.board)(answer)) if encoded else answer.entries()
        assert out == [{"Host": n, "Score": 0} for n in ("hot", "warm", "cool")]
    assert ext.ledger.known("u1") is None
    assert len(ext.shadow) == 1


def test_agreement_and_load_excess_are_recorded_when_the_pod_is_bound() -> None:
    ext, metrics, source = extender(SHADOW)
    names = ["hot", "warm", "cool"]
    ext.prioritize(ExtenderArgs(pod("a"), None, names))
    ext.prioritize(ExtenderArgs(pod("b"), None, names))
    source.bind("a", "cool")  # the node Ballast favours
    source.bind("b", "warm")  # another one
    source.bind("never-scored", "hot")  # no note: not counted
    assert sample(metrics, "ballast_extender_shadow_choices_total", agreed="true") == 1
    assert sample(metrics, "ballast_extender_shadow_choices_total", agreed="false") == 1
    assert sample(metrics, "ballast_extender_shadow_chosen_load_excess_count") == 2
    # the mean after the pod (cpu +0.053125, memory +0.021875): warm's 0.3375, cool's 0.1875; their
    # standing dominant loads: warm's cpu 0.4, cool's memory 0.2; with the shipped dominant-resource
    # weight d ((0.4 - 0.1) * 1.0 / 2.0 = 0.15 by the weighted mean alone)
    d = ENFORCE.dominant_resource_weight
    expected = (2 * 0.3375 + d * 0.4) / (2 + d) - (2 * 0.1875 + d * 0.2) / (2 + d)
    excess = sample(metrics, "ballast_extender_shadow_chosen_load_excess_sum")
    assert excess == pytest.approx(expected, abs=1e-6)
    assert sample(metrics, "ballast_extender_shadow_chosen_load_excess_bucket", le="0.0") == 1


def test_book_forgets_old_notes_and_has_no_preference_for_many_ties() -> None:
    clock = [0.0]
    agreed: list[bool] = []
    book = ShadowBook(agreed.append, lambda x: None, lambda: clock[0])
    many = [f"n{i}" for i in range(MAX_FAVOURED + 1)]
    book.note("tie", many, [10] * len(many), 0, 0)
    book.note("old", ["a", "b"], [10, 0], 0, 0)
    assert book.placed("tie", "anything") is True
    clock[0] = TTL_SECONDS + 1
    assert book.placed("old", "b") is None and len(book) == 0 and agreed == [True]


def test_mode_flips_on_reload_and_a_bad_mode_is_refused(tmp_path: Path, caplog) -> None:
    path = tmp_path / "policy.yaml"
    shutil.copy(POLICY_FILE, path)
    app = create_app(load_policy(path), policy_path=str(path), policy_poll_seconds=0, clock=lambda: NOW)
    store = app.state.services.store
    objs = [node("hot", 0.9) | {"metadata": node("hot", 0.9)["metadata"] | {"resourceVersion": "1"}}]
    body = {"Pod": pod(), "Nodes": {"items": objs}}
    with TestClient(app) as c:
        assert c.post("/filter", json=body).json()["FailedNodes"].keys() == {"hot"}
        path.write_text(path.read_text().replace("spec:\n", "spec:\n  mode: shadow\n", 1))
        assert store.reload("test") is True
        assert "policy mode: shadow" in caplog.text
        assert c.post("/filter", json=body).json()["FailedNodes"] == {}
        assert c.get("/nodes").json()["mode"] == "shadow"
        explained = c.post("/explain", json=body).json()
        assert explained["mode"] == "shadow" and explained["nodes"][0]["filter"]["passes"] is False
        path.write_text(path.read_text().replace("mode: shadow", "mode: observe"))
        assert store.reload("test") is False
        ready = c.get("/readyz")
        assert ready.status_code == 503 and "spec.mode" in ready.json()["policy"]["reloadError"]
        assert c.post("/filter", json=body).json()["FailedNodes"] == {}  # the last good policy: shadow


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ("  mode: dry-run\n", "spec.mode"),
        ("  nodePools: [{name: a}]\n", "spec.nodePools[0].nodeSelector"),
        ("  prod: {priorityThreshold: x}\n", "spec.prod.priorityThreshold"),
        ("  predicate: [{name: cpu, maxLimitPecent: 0.5, onMissing: no}]\n", "spec.predicate[0].onMissing"),
    ],
)
def test_bad_new_keys_exit_2_at_start_with_the_field_path(
    tmp_path: Path, capsys, extra: str, path: str
) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("spec:\n  syncPolicy: [{name: cpu, period: 3m}]\n" + extra)
    assert main(["extender", "--policy", str(bad)]) == 2
    assert path in capsys.readouterr().err


# -- with cluster access (the fake API server): bind never refuses for load, the pod watch compares ----


@pytest.fixture
def shadow_cluster(fake_kube, kubeconfig: Path) -> Iterator[tuple[TestClient, object]]:
    for n in fixture_nodes().values():
        fake_kube.add(clean(n) | {"kind": "Node"})
    kube = Kube(load_api_client(str(kubeconfig)), timeout=2.0)
    policy = dataclasses.replace(load_policy(POLICY_FILE), mode="shadow")
    app = create_app(policy, kube=kube, clock=lambda: CAPTURE_TIME, policy_poll_seconds=0)
    with TestClient(app) as client:
        assert app.state.services.cache.wait_synced(10)
        yield client, app


def test_shadow_bind_goes_ahead_on_a_full_node_and_is_counted(shadow_cluster, fake_kube) -> None:
    client, app = shadow_cluster
    created = fake_kube.add(pod_obj("big", cpu="2"))
    pod = fake_kube.get("pods", "big", namespace="shop")
    scores = client.post("/prioritize", json={"Pod": pod, "NodeNames": [HOT, IDLE]}).json()
    assert {e["Score"] for e in scores} == {0}
    assert _bind(client, "big", created["metadata"]["uid"], HOT) == ""
    assert fake_kube.get("pods", "big", namespace="shop")["spec"]["nodeName"] == HOT
    assert _metric(app, "ballast_extender_binds_refused_total", metric="cpu_usage_avg_5m") == 0
    assert _metric(app, "ballast_extender_shadow_binds_would_refuse_total", metric="cpu_usage_avg_5m") == 1
    # the pod watch sees it bound where Ballast would not have put it
    wait_for(lambda: _metric(app, "ballast_extender_shadow_choices_total", agreed="false") == 1)
    assert _metric(app, "ballast_extender_shadow_chosen_load_excess_sum") > 0
    time.sleep(0)


def test_shadow_preempt_keeps_every_candidate() -> None:
    body = {"Pod": pod(), "NodeNameToMetaVictims": {"hot": {"Pods": [], "NumPDBViolations": 0}}}
    enforce, _, _ = extender(ENFORCE)
    assert enforce.preempt(body)["NodeNameToMetaVictims"] == {}  # still over the limit without victims
    shadow, _, _ = extender(SHADOW)
    assert list(shadow.preempt(body)["NodeNameToMetaVictims"]) == ["hot"]
