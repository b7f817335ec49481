"""The cache's watches after an API-server outage: quick to come back, visible while away.

Against the fake API server (real REST paths and watches); the outage is every request answered 503 and
every open watch cut.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from ballast.extender.main import create_app
from ballast.kube.client import ApiError, Kube, Reflector, load_api_client
from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE, wait_for
from tests.annotator.test_run import prom  # noqa: F401 (a fixture)


def _samples(client: TestClient, name: str) -> dict[str, float]:
    text = client.get("/metrics").text
    return {
        s.labels["resource"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_readyz_and_metrics_tell_a_disconnected_cache_and_it_recovers_within_seconds(
    fake_kube, kubeconfig: Path
) -> None:
    kube = Kube(load_api_client(str(kubeconfig)), timeout=2.0)
    app = create_app(load_policy(POLICY_FILE), kube=kube, policy_poll_seconds=0, access_log=False)
    cache = app.state.services.cache
    cache.stale_after = lambda: 1.0  # the shipped policy's 3m, shortened for the test
    with TestClient(app) as client:
        assert cache.wait_synced(10)
        assert client.get("/readyz").status_code == 200
        ages = _samples(client, "ballast_extender_watch_last_event_age_seconds")
        assert set(ages) == {"nodes", "pods", "noderesourcetopologies", "noderesourcetopologies.v1alpha2"}
        assert 0 <= ages["nodes"] < 10
        # the outage: a long one first, so the backoff has grown as far as it goes
        fake_kube.fail_next(None, r".", 503, message="down for the test", count=None)
        fake_kube.store.abort_watchers("drop")
        r = wait_for(
            lambda: (r := client.get("/readyz")).status_code == 503 and r, timeout=10, what="readyz 503"
        )
        assert "disconnected" in r.json()["problems"][0] and "nodes" in r.json()["problems"][0]
        assert _samples(client, "ballast_extender_watch_errors_total")["nodes"] >= 1
        assert _samples(client, "ballast_extender_watch_disconnected_seconds")["nodes"] > 0
        time.sleep(8)  # long enough for an uncapped backoff to double past 8 s
        fake_kube.clear_injections()
        start = time.monotonic()
        wait_for(lambda: client.get("/readyz").status_code == 200, timeout=30, what="readyz 200 again")
        # a watch that was healthy before the outage retries every few seconds at most (4 s x 1.5 jitter)
        assert time.monotonic() - start < 6.5
        assert _samples(client, "ballast_extender_watch_disconnected_seconds")["nodes"] == 0


def test_a_reflector_that_was_healthy_backs_off_a_few_seconds_at_most(caplog) -> None:
    r = Reflector(Kube(None), "/api/v1/nodes", handler=None, backoff_max=30.0, recover_max=4.0)  # type: ignore[arg-type]
    r._stop.set()  # no waiting in the test
    backoff = r.backoff_initial
    for _ in range(10):
        backoff = r._failed(ApiError(0, "Unavailable", "down"), backoff)
    assert backoff == 30.0  # never reached: the long cap (a collection that may not exist yet)
    r._reached = True
    with caplog.at_level(logging.WARNING, "ballast.kube"):
        backoff = r._failed(ApiError(0, "Unavailable", "down"), backoff)
    assert backoff <= 4.0
    delay = float(caplog.records[-1].getMessage().rsplit("in ", 1)[1].rstrip("s"))
    assert delay <= 6.0


def test_a_failed_call_is_one_attempt_with_no_urllib3_warnings(tmp_path: Path, caplog) -> None:
    """No hidden retries: urllib3 retried each failed call three times (a WARNING line each, and three
    times the timeout); the caller's own retry logs the failure once."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connections are refused
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    kube = Kube(load_api_client(str(config)), timeout=2.0)
    with caplog.at_level(logging.DEBUG):
        try:
            kube.get("/api/v1/nodes")
        except ApiError as exc:
            assert exc.code == 0
        else:
            raise AssertionError("a refused connection cannot answer")
    assert [r for r in caplog.records if r.name.startswith("urllib3") and r.levelno >= logging.WARNING] == []


def test_every_program_has_the_same_stall_bound_flag_and_default() -> None:
    """``--watch-stall-timeout`` defaults to ``ballast.kube.client.WATCH_STALL_SECONDS`` (two minutes: twice
    the
    bookmark interval) in every program that watches."""
    from ballast.cli import build_parser
    from ballast.kube.client import WATCH_STALL_SECONDS
    from ballast.program.flags import WATCH_STALL_DEFAULT, positive_seconds

    assert positive_seconds(WATCH_STALL_DEFAULT) == WATCH_STALL_SECONDS == 120.0
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for program in ("extender", "annotator", "rebalancer"):
        flag = next(a for a in sub.choices[program]._actions if "--watch-stall-timeout" in a.option_strings)
        assert positive_seconds(flag.default) == WATCH_STALL_SECONDS, program


def test_the_annotator_readyz_tells_a_watch_that_sent_nothing_for_the_stall_bound(
    prom,  # noqa: F811 (the fixture imported above)
    fake_kube,
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    """The fake API server sends a bookmark a minute; with a bound of 1 s, the quiet bound-pods watch counts
    as stalled (the nodes watch too, between two of the annotator's own patches): /readyz says which."""
    from ballast.testing.annotator import add_node
    from ballast.testing.prometheus import free_port
    from tests.annotator.test_run import FAST_POLICY, NODES, Replica, run_args, scrape

    for name, ip in NODES.items():
        add_node(fake_kube, name, ip)
    policy = tmp_path / "policy.yaml"
    policy.write_text(FAST_POLICY)
    port = free_port()
    args = run_args(prom.url, kubeconfig, policy, "--metrics-port", str(port), "--watch-stall-timeout", "1s")
    replica = Replica(args).start()
    try:

        def stalled() -> object:
            try:
                r = scrape(port, "/readyz")
            except httpx.TransportError:  # not listening yet
                return None
            return r.status_code == 503 and "stalled" in r.text and r

        r = wait_for(stalled, timeout=20, what="readyz 503 naming a stalled watch")
        assert "pods watch" in r.text or "nodes watch" in r.text, r.text
    finally:
        assert replica.shutdown() == 0
