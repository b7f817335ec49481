"""Throughput under the real kube-scheduler: how fast a backlog drains with and without an extender.

A loopback control plane (etcd + kube-apiserver + kube-scheduler v1.36.2, ``ballast.testing.controlplane``)
holds 100
nodes with fresh load annotations. For each run a backlog of small pods is created while no scheduler
runs; then kube-scheduler starts and drains it, and a pod watch times the first to the last binding.
Modes alternate within one run of the bench, so machine noise hits them alike, in the given order in odd
rounds and in the reverse order in even ones, so that no mode always runs after the same one:

- ``none``: kube-scheduler alone;
- ``echo``: a bare FastAPI extender (``bench.echo_extender``: filter + prioritize, names mode) - the floor,
  run as a user would run it (``uvicorn bench.echo_extender:app``, uvicorn's defaults: its HTTP
  implementation and event loop are what uvicorn picks from what is installed, the same environment as
  Ballast's); the bench prints which HTTP implementation and event loop each extender runs;
- ``ballast``: ``ballast extender`` with the same verbs and its watch-driven cache;
- ``echo-bind``: the echo extender also binding, with a minimal client that shares nothing with Ballast's
  (``bench.bind_client``: the standard library's ``http.client`` over TLS, keep-alive per worker thread);
- ``ballast-bind``: Ballast with bind, as ``scheduler-config-node-cache.yaml`` ships it.

Each mode's pods/s is reported as the median with its range over the rounds, and as ratios computed within
each round (this machine is shared, so absolute rates swing between rounds while a round's modes see the same
load): Ballast over its echo floor, and every mode over kube-scheduler with no extender. The CPU seconds each
process spends per pod between the first and the last binding (``/proc/PID/stat``) show where the time goes:
the echo, Ballast, kube-scheduler, kube-apiserver, etcd and the bench itself (its pod watch).

    python -m bench.cluster_bench [--rounds 3] [--pods 500] [--nodes 100]

Needs the control-plane binaries (``../shared/k8s`` or ``BALLAST_KUBE_BIN``) and etcd; see
ballast/testing/binaries.py.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

from ballast.contract.annotations import CRANE_LOAD_METRICS, is_pressure_metric
from ballast.testing.controlplane import ControlPlane, node_body, pod_body, wait_until
from bench.harness import ballast_cmd, echo_cmd, free_port, granian_cmd, serve_process

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "scheduler_config" / "policy.yaml"
SCHEDULER = "ballast-scheduler"
MODES = ("none", "echo", "ballast", "echo-bind", "ballast-bind")


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def annotations(usage: float, metrics: Iterable[str] = CRANE_LOAD_METRICS) -> dict[str, str]:
    """Each of ``metrics`` at ``usage``, measured now (fresh for the metric's period + 5m): a steady node,
    whose percentiles equal its mean. A pressure metric is 0 (a steady node under its CPUs stalls nothing)."""
    now = stamp()
    return {m: f"{0.0 if is_pressure_metric(m) else usage:.5f},{now}" for m in metrics}


def scheduler_config(url: str | None, bind: bool) -> dict[str, Any]:
    """The shipped profile and extender settings; no extender for ``url=None``."""
    # kube-scheduler's API client defaults to 50 QPS (burst 100), which alone caps a drain near 60 pods/s
    # whatever the extender does; lifted here so the bench measures the scheduling path, not the throttle.
    config: dict[str, Any] = {
        "profiles": [{"schedulerName": SCHEDULER}],
        "clientConnection": {"qps": 1000, "burst": 1000},
    }
    if url is not None:
        ext: dict[str, Any] = {
            "urlPrefix": url,
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "weight": 3,
            "nodeCacheCapable": True,
            "ignorable": False,
            "httpTimeout": "5s",
        }
        if bind:
            ext["bindVerb"] = "bind"
        config["extenders"] = [ext]
    return config


class Api:
    """Plain JSON requests to the loopback API server (the admin client certificate), kept cheap so the
    bench process itself does not slow the drain it measures."""

    def __init__(self, cp: ControlPlane) -> None:
        self.base = cp.server_url
        self.ctx = cp.ssl_context()
        self.http = httpx.Client(base_url=self.base, verify=self.ctx, timeout=60)

    def get(self, path: str) -> dict[str, Any]:
        r = self.http.get(path)
        r.raise_for_status()
        return orjson.loads(r.content)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post(path, content=orjson.dumps(body), headers={"Content-Type": "application/json"})
        r.raise_for_status()
        return orjson.loads(r.content)

    def patch(self, path: str, body: dict[str, Any]) -> None:
        r = self.http.patch(
            path, content=orjson.dumps(body), headers={"Content-Type": "application/merge-patch+json"}
        )
        r.raise_for_status()

    def delete(self, path: str) -> None:
        self.http.delete(path).raise_for_status()

    def pods(self) -> list[dict[str, Any]]:
        return self.get("/api/v1/namespaces/default/pods")["items"]


def create_nodes(
    api: Api, count: int, loads: list[float], metrics: Iterable[str] = CRANE_LOAD_METRICS
) -> list[str]:
    names = []
    for i in range(count):
        body = node_body(f"node-{i:03d}", cpu="8", memory="32Gi", annotations=annotations(loads[i], metrics))
        api.post("/api/v1/nodes", body)
        api.patch(f"/api/v1/nodes/{body['metadata']['name']}/status", {"status": body["status"]})
        names.append(body["metadata"]["name"])
    return names


def refresh_loads(
    api: Api, names: list[str], loads: list[float], metrics: Iterable[str] = CRANE_LOAD_METRICS
) -> None:
    """Fresh timestamps before each run, so no value goes stale during a long bench."""
    for name, usage in zip(names, loads, strict=True):
        api.patch(f"/api/v1/nodes/{name}", {"metadata": {"annotations": annotations(usage, metrics)}})


def clear_pods(api: Api) -> None:
    api.delete("/api/v1/namespaces/default/pods?gracePeriodSeconds=0")
    wait_until(lambda: not api.pods(), None, "pods deleted", 120)


def _stat_seconds(path: str) -> float | None:
    """User + system CPU seconds from a ``/proc`` ``stat`` file; ``None`` when it is gone."""
    try:
        with open(path, "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except FileNotFoundError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, tree: bool = True) -> float:
    """User + system CPU seconds ``pid`` (all its threads) and, with ``tree``, its descendants use (granian
    serves from a worker process), from ``/proc/PID/stat``."""
    total = _stat_seconds(f"/proc/{pid}/stat")
    if total is None:
        return 0.0
    return total + (sum(cpu_seconds(child) for child in children(pid)) if tree else 0.0)


def thread_cpu_seconds(pid: int, tid: int) -> float:
    """User + system CPU seconds of one thread of ``pid`` (``/proc/PID/task/TID/stat``)."""
    return _stat_seconds(f"/proc/{pid}/task/{tid}/stat") or 0.0


LOOP = "/loop"
"""Suffix of an extender's main-thread entry in the CPU readings: under uvicorn, the event loop serving
every request (and Ballast's binds and watch events, both handled there); the rest of the process is the
echo's bind workers and Ballast's reflector threads (lists, and opening each watch)."""


def children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(FileNotFoundError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    return out


class BindWatch:
    """Watches pods from a resourceVersion and notes when each one is first seen bound; reads every watched
    process's CPU time at the first and at the last binding."""

    def __init__(
        self, cp: ControlPlane, expected: set[str], pids: Callable[[], dict[str, int]] = dict
    ) -> None:
        self.expected = expected
        self.bound: dict[str, float] = {}
        self.node_of: dict[str, str] = {}
        self.pids = pids
        self.cpu_first: dict[str, float] = {}
        self.cpu_last: dict[str, float] = {}
        self.done = threading.Event()
        self.api = Api(cp)
        rv = self.api.get("/api/v1/namespaces/default/pods")["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, args=(rv,), daemon=True)
        self.thread.start()

    def _run(self, rv: str) -> None:
        try:
            self._watch(rv)
        except Exception as exc:  # shown, not swallowed: a dead watch would look like a stuck drain
            print(f"pod watch failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def _watch(self, rv: str) -> None:
        """The API server ends a watch whose reader falls behind a burst: resume from the last version."""
        self.rv = rv
        while not self.done.is_set():
            with contextlib.suppress(httpx.RemoteProtocolError, httpx.ReadError):
                self._stream()

    def _stream(self) -> None:
        path = f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={self.rv}&timeoutSeconds=600"
        with self.api.http.stream("GET", path, timeout=None) as resp:
            for line in resp.iter_lines():
                if not line:
                    continue
                event = orjson.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    raise RuntimeError(f"watch error: {obj}")
                self.rv = obj["metadata"].get("resourceVersion", self.rv)
                name = obj["metadata"].get("name")
                node = obj.get("spec", {}).get("nodeName")
                if node and name in self.expected and name not in self.bound:
                    self.bound[name] = time.monotonic()
                    self.node_of[name] = node
                    if len(self.bound) == 1:
                        self.cpu_first = self._cpu()
                    if len(self.bound) == len(self.expected):
                        self.cpu_last = self._cpu()
                        self.done.set()
                        return

    def _cpu(self) -> dict[str, float]:
        # the bench's own process alone: the servers it started are its children
        pids = self.pids()
        out = {name: cpu_seconds(pid, name != "bench") for name, pid in pids.items()}
        for name, pid in pids.items():
            # uvicorn serves from the process's main thread (granian from a child)
            if name.partition("@")[0] in ("echo", "ballast") and not name.endswith("@granian"):
                out[name + LOOP] = thread_cpu_seconds(pid, pid)
        return out

    def cpu_per_pod(self) -> dict[str, float]:
        """CPU seconds per pod of each process, from the first to the last binding."""
        pods = max(len(self.bound) - 1, 1)
        both = self.cpu_last.keys() & self.cpu_first.keys()
        return {name: (self.cpu_last[name] - self.cpu_first[name]) / pods for name in both}

    def wait(self, timeout: float) -> bool:
        return self.done.wait(timeout)


def drain(
    cp: ControlPlane,
    api: Api,
    config: dict[str, Any],
    pods: list[dict[str, Any]],
    timeout: float = 120,
    pids: dict[str, int] | None = None,
) -> tuple[float, dict[str, str], dict[str, float]]:
    """Create the backlog with no scheduler running, start kube-scheduler, wait for every binding.
    Returns pods per second from the first to the last binding, pod -> node, and the CPU seconds per pod
    of each process in ``pids`` (and of kube-scheduler, kube-apiserver, etcd) over the same span."""
    cp.stop_scheduler()
    clear_pods(api)
    names = {p["metadata"]["name"] for p in pods}
    watched = dict(pids or {})
    watched |= {"kube-apiserver": cp.apiserver.proc.pid, "etcd": cp.etcd.proc.pid, "bench": os.getpid()}

    def processes() -> dict[str, int]:
        # kube-scheduler is known once spawned, before it can bind anything
        scheduler = cp.scheduler
        return watched | ({"kube-scheduler": scheduler.proc.pid} if scheduler is not None else {})

    watch = BindWatch(cp, names, processes)
    for p in pods:
        api.post("/api/v1/namespaces/default/pods", p)
    cp.start_scheduler(config)
    try:
        if not watch.wait(timeout):
            really = sum(1 for p in api.pods() if p["spec"].get("nodeName"))
            raise RuntimeError(
                f"the watch saw {len(watch.bound)} of {len(names)} pods bound in {timeout:.0f} s "
                f"(the API has {really} bound)"
            )
    finally:
        cp.stop_scheduler()
    times = sorted(watch.bound.values())
    return (len(times) - 1) / max(times[-1] - times[0], 1e-9), dict(watch.node_of), watch.cpu_per_pod()


def small_pods(count: int, prefix: str) -> list[dict[str, Any]]:
    return [
        pod_body(f"{prefix}-{i:04d}", scheduler_name=SCHEDULER, requests={"cpu": "50m", "memory": "64Mi"})
        for i in range(count)
    ]


WATCH_THREADS = "uvicorn-watch-threads"
"""The server name for Ballast under uvicorn with its watches followed in threads rather than on its event
loop (``bench.threaded_watches``); the echo has no watch and no second copy."""
NO_UVLOOP = "uvicorn-asyncio"
"""The server name for both extenders under uvicorn with uvloop's import blocked: asyncio's event loop
beside uvloop's, to measure uvloop once it is installed (``pip install uvloop``)."""


BEFORE = "before"
"""The server name for Ballast from another checkout (``--before DIR``, e.g. the commit before a change),
under uvicorn as shipped, beside this checkout's: a change's cost measured in one run, each against the
same echo floor."""


def _uvloop_blocked() -> str:
    """A directory whose ``uvloop`` module fails to import, for ``PYTHONPATH``: uvicorn's automatic loop
    choice then takes asyncio's, for the extender's process only."""
    where = Path(tempfile.mkdtemp(prefix="no-uvloop-"))
    atexit.register(shutil.rmtree, where, True)
    (where / "uvloop.py").write_text('raise ImportError("uvloop blocked by the cluster bench")\n')
    return str(where)


def extender_cmds(cp: ControlPlane, server: str, log_level: str) -> dict[str, tuple[list[str], int, dict]]:
    """The echo extender's and Ballast's commands for ``server``: name -> (argv, port, environment)."""
    if server == WATCH_THREADS:
        argv, port, env = extender_cmds(cp, "uvicorn", log_level)["ballast"]
        threaded = [sys.executable, "-m", "bench.threaded_watches", *argv[argv.index("ballast") + 1 :]]
        return {f"ballast@{server}": (threaded, port, env)}
    if server == BEFORE:
        argv, port, env = extender_cmds(cp, "uvicorn", log_level)["ballast"]
        boot = (
            "import sys; sys.path.insert(0, sys.argv.pop(1)); from ballast.cli import main; sys.exit(main())"
        )
        before = os.environ["BALLAST_BENCH_BEFORE"]
        return {
            f"ballast@{server}": (
                [sys.executable, "-c", boot, before, *argv[argv.index("ballast") + 1 :]],
                port,
                env,
            )
        }
    if server == NO_UVLOOP:
        paths = [_uvloop_blocked(), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        blocked = {"PYTHONPATH": os.pathsep.join(paths)}
        return {
            f"{name}@{server}": (argv, port, env | blocked)
            for name, (argv, port, env) in extender_cmds(cp, "uvicorn", log_level).items()
        }
    echo_port, ballast_port = free_port(), free_port()
    echo_env = {"ECHO_KUBECONFIG": str(cp.kubeconfig)}
    suffix = "" if server == "uvicorn" else f"@{server}"
    if server == "uvicorn":
        ballast = ballast_cmd(
            ballast_port, str(POLICY), "--kubeconfig", str(cp.kubeconfig), "--policy-poll", "0"
        )
        if log_level:
            ballast[ballast.index("--log-level") + 1] = log_level
        return {
            "echo": (echo_cmd(echo_port), echo_port, echo_env),
            "ballast": (ballast, ballast_port, {}),
        }
    ballast_env = {
        "BALLAST_POLICY": str(POLICY),
        "BALLAST_KUBECONFIG": str(cp.kubeconfig),
        "BALLAST_LOG_LEVEL": log_level or "info",
    }
    return {
        f"echo{suffix}": (granian_cmd("bench.echo_extender:app", echo_port), echo_port, echo_env),
        f"ballast{suffix}": (
            granian_cmd("bench.ballast_asgi:app", ballast_port, True),
            ballast_port,
            ballast_env,
        ),
    }


@contextlib.contextmanager
def extenders(
    cp: ControlPlane, log_level: str, servers: list[str]
) -> Iterator[tuple[dict[str, str], dict[str, int]]]:
    """The echo extender and Ballast (with its node cache) under each server, each in its own process:
    their URLs and PIDs."""
    urls: dict[str, str] = {}
    pids: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        for server in servers:
            for name, (argv, port, env) in extender_cmds(cp, server, log_level).items():
                url, proc = stack.enter_context(serve_process(argv, port, env))
                urls[name], pids[name] = url, proc.pid
        for name, url in urls.items():
            if name.startswith("ballast"):

                def ready(url: str = url) -> bool:
                    with urllib.request.urlopen(f"{url}/readyz", timeout=5) as resp:
                        return resp.status == 200

                wait_until(ready, None, f"{name} /readyz", 60)
        for name, url in urls.items():
            print(f"{name}: {server_stack(url)}")
        yield urls, pids


def server_stack(url: str) -> str:
    """What serves an extender, as its ``/version`` reports it from inside a request: the HTTP
    implementation and the event loop."""
    with urllib.request.urlopen(f"{url}/version", timeout=5) as resp:
        server = orjson.loads(resp.read()).get("server") or {}
    return f"HTTP {server.get('http', '?')}, event loop {server.get('loop', '?')}"


def split_mode(mode: str) -> tuple[str, bool]:
    """``ballast-bind@granian`` -> (``ballast@granian``, True): the extender's process name, and bind."""
    base, _, server = mode.partition("@")
    name = base.removesuffix("-bind") + (f"@{server}" if server else "")
    return name, base.endswith("-bind")


def mode_config(mode: str, urls: dict[str, str]) -> dict[str, Any]:
    if mode == "none":
        return scheduler_config(None, False)
    name, bind = split_mode(mode)
    return scheduler_config(urls[name], bind)


def summary(values: list[float], fmt: str = ".1f", unit: str = "") -> str:
    """Median (min-max)."""
    if not values:
        return "-"
    med, lo, hi = statistics.median(values), min(values), max(values)
    return f"{med:{fmt}}{unit} ({lo:{fmt}}-{hi:{fmt}}{unit})"


def floor_of(mode: str) -> str | None:
    """The echo mode Ballast's ``mode`` is measured against (same server, same verbs; the other checkout's
    against the echo under uvicorn, as shipped)."""
    if not mode.startswith("ballast"):
        return None
    return mode.replace("ballast", "echo", 1).removesuffix(f"@{BEFORE}")


PROCESSES = ("echo", "ballast", "kube-scheduler", "kube-apiserver", "etcd", "bench")


def report(modes: list[str], rates: dict[str, list[float]], cpu: dict[str, list[dict[str, float]]]) -> None:
    """The tables: pods/s and the within-round ratios, then CPU milliseconds per pod of each process."""
    rounds = len(rates[modes[0]])
    print(f"\n| mode | pods/s, median (range over {rounds} rounds) | / its echo floor, per round "
          "| / no extender, per round |")  # fmt: skip
    print("|---|---:|---:|---:|")
    for mode in modes:
        floor = floor_of(mode)
        to_floor = [a / b for a, b in zip(rates[mode], rates[floor], strict=True)] if floor in rates else []
        to_none = (
            [a / b for a, b in zip(rates[mode], rates["none"], strict=True)]
            if "none" in rates and mode != "none"
            else []
        )
        print(
            f"| {mode} | {summary(rates[mode])} | {summary(to_floor, '.2f', 'x')} "
            f"| {summary(to_none, '.2f', 'x')} |"
        )
    others = [m for m in modes if "@" in m and m.partition("@")[0] in rates]
    if others:
        print("\n| mode | / the same mode under uvicorn, per round |")
        print("|---|---:|")
        for mode in others:
            base = mode.partition("@")[0]
            ratios = [a / b for a, b in zip(rates[mode], rates[base], strict=True)]
            print(f"| {mode} | {summary(ratios, '.2f', 'x')} |")
    print("\nCPU milliseconds per pod, first to last binding, median (range); the extender column is the")
    print("process serving the mode (echo or Ballast, under its server), the other extenders sit idle:\n")
    columns = ("extender", *PROCESSES[2:])
    print("| mode | " + " | ".join(columns) + " | all |")
    print("|---|" + "---:|" * (len(columns) + 1))
    for mode in modes:
        serving = split_mode(mode)[0] if mode != "none" else None
        cells = []
        for p in columns:
            who = serving if p == "extender" else p
            cells.append(summary([c[who] * 1000 for c in cpu[mode] if who in c], ".2f"))
        total = summary([sum(v for k, v in c.items() if LOOP not in k) * 1000 for c in cpu[mode]], ".2f")
        print(f"| {mode} | " + " | ".join(cells) + f" | {total} |")
    split = [m for m in modes if m != "none" and any(split_mode(m)[0] + LOOP in c for c in cpu[m])]
    if split:
        print("\nThe serving extender's CPU milliseconds per pod by thread, median (range): uvicorn's")
        print("event loop (the main thread: HTTP, the verbs' decisions, Ballast's binds and watch events)")
        print("and every other thread (the echo's bind workers, Ballast's lists and watch openings):\n")
        print("| mode | event loop | other threads |")
        print("|---|---:|---:|")
        for mode in split:
            who = split_mode(mode)[0]
            loop = [c[who + LOOP] * 1000 for c in cpu[mode] if who + LOOP in c]
            rest = [(c[who] - c[who + LOOP]) * 1000 for c in cpu[mode] if who + LOOP in c]
            print(f"| {mode} | {summary(loop, '.2f')} | {summary(rest, '.2f')} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of the modes")
    parser.add_argument(
        "--servers",
        default="uvicorn",
        help="ASGI servers for both extenders: uvicorn (as shipped), granian (modes NAME@granian), "
        f"{NO_UVLOOP} (uvicorn with uvloop's import blocked: asyncio's event loop), {WATCH_THREADS} "
        "(Ballast only, its watches followed in threads)",
    )
    parser.add_argument(
        "--ballast-log-level", default="info", help="Ballast's --log-level (info: as deployed by default)"
    )
    parser.add_argument(
        "--before",
        metavar="DIR",
        help="another checkout of Ballast (e.g. `git worktree add DIR <commit>`), run as the server "
        f"{BEFORE} (modes ballast@before, ballast-bind@before) beside this one",
    )
    args = parser.parse_args(argv)
    if args.before:
        os.environ["BALLAST_BENCH_BEFORE"] = str(Path(args.before).resolve())
        args.servers += f",{BEFORE}"
    servers = [s for s in args.servers.split(",") if s]
    base_modes = [m for m in args.modes.split(",") if m]
    modes = [
        m + ("" if s == "uvicorn" or m == "none" else f"@{s}")
        for s in servers
        for m in base_modes
        if not (s in (WATCH_THREADS, BEFORE) and m.startswith("echo"))
    ]
    modes = list(dict.fromkeys(modes))
    rng = random.Random(14)
    loads = [rng.uniform(0.10, 0.40) for _ in range(args.nodes)]
    results: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    print(f"cluster bench: {args.nodes} nodes, {args.pods} pods, {args.rounds} rounds, {os.cpu_count()} CPUs")
    print(f"load before: {os.getloadavg()}")
    with ControlPlane() as cp:
        api = Api(cp)
        names = create_nodes(api, args.nodes, loads)
        with extenders(cp, args.ballast_log_level, servers) as (urls, pids):
            for r in range(args.rounds):
                for mode in modes if r % 2 == 0 else modes[::-1]:
                    refresh_loads(api, names, loads)
                    pods = small_pods(args.pods, f"r{r}-{mode.replace('@', '-')}")
                    rate, _, per_pod = drain(cp, api, mode_config(mode, urls), pods, pids=pids)
                    results[mode].append(rate)
                    cpu[mode].append(per_pod)
                    used = " ".join(f"{p}={v * 1000:.2f}" for p, v in per_pod.items())
                    print(f"  round {r + 1} {mode:13s} {rate:7.1f} pods/s  CPU ms/pod: {used}", flush=True)
    report(modes, results, cpu)
    print(f"\nload after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
