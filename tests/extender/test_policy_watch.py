"""The extender reads its policy file again when it changes (``--policy-poll``) and on SIGHUP, through the
programs' one ``PolicyReload``; a file that does not load leaves the running policy in place."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from fastapi.testclient import TestClient

from ballast.extender.main import create_app
from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE, ROOT, wait_for


def _policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY_FILE.read_text())
    return path


def test_a_changed_file_is_read_within_the_poll(tmp_path: Path) -> None:
    path = _policy(tmp_path)
    app = create_app(load_policy(path), policy_path=path, policy_poll_seconds=0.2)
    store = app.state.services.store
    with TestClient(app):
        first = store.generation
        path.write_text(POLICY_FILE.read_text().replace("cpu_usage_avg_5m", "cpu_usage_avg_2m"))
        wait_for(lambda: store.generation > first, timeout=10, what="the changed policy")
        assert "cpu_usage_avg_2m" in store.current.metrics
        path.write_text("spec: [not a policy")
        wait_for(lambda: store.failure is not None, timeout=10, what="the refusal of a bad file")
        assert "cpu_usage_avg_2m" in store.current.metrics


def _reloads(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    match = re.search(r'^ballast_policy_reloads_total\{result="ok"\} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def test_sighup_reloads_without_a_poll(tmp_path: Path) -> None:
    path = _policy(tmp_path)
    argv = [sys.executable, "-m", "ballast", "extender", "--port", "0", "--policy", str(path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [*argv, "--policy-poll", "0"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        port = 0
        assert proc.stderr is not None
        for line in proc.stderr:
            if found := re.search(r"listening on [\d.]+:(\d+)", line):
                port = int(found.group(1))
                break
        assert port, "the extender never said where it listens"
        assert _reloads(port) == 0
        path.write_text(POLICY_FILE.read_text().replace("cpu_usage_avg_5m", "cpu_usage_avg_2m"))
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: _reloads(port) == 1, timeout=10, what="the reload SIGHUP asked for")
    finally:
        proc.terminate()
        proc.wait(10)
