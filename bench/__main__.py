"""Run every benchmark in turn (``make bench``): ``python -m bench``.

A bench whose real parts are missing (the control-plane binaries and etcd, or Prometheus) is not started:
the runner says what is missing and goes on with the others. Each bench runs in a process of its own, as
``python -m bench.NAME`` would run it alone. The exit status is 1 when a bench that did run failed, else 0.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass


def control_plane() -> str | None:
    """What the loopback control plane lacks (kube-apiserver, kube-scheduler, kubectl, etcd, openssl)."""
    from ballast.testing.binaries import MissingPiece, check_available

    try:
        check_available()
    except MissingPiece as exc:
        return f"{exc} (see the README's Tests section)"
    return None


def real_node() -> str | None:
    """What a real test node lacks (root, cgroup v1, containerd, the kubelet, the node recipe)."""
    from ballast.testing.binaries import MissingPiece
    from ballast.testing.realnode import check_real_nodes

    try:
        check_real_nodes()
    except MissingPiece as exc:
        return str(exc)
    return None


def prometheus() -> str | None:
    absent = [name for name in ("prometheus", "promtool") if shutil.which(name) is None]
    if absent:
        return f"{' and '.join(absent)} not on PATH (Debian: apt-get install prometheus)"
    return None


@dataclass(frozen=True)
class Bench:
    module: str
    needs: tuple[Callable[[], str | None], ...] = ()

    def missing(self) -> list[str]:
        return [reason for need in self.needs if (reason := need()) is not None]


BENCHES = (
    Bench("extender_bench"),
    Bench("names_bench"),
    Bench("annotator_bench", (prometheus,)),
    Bench("rebalancer_bench"),
    Bench("cpu_assignment_bench"),
    Bench("reconcile_bench"),
    Bench("agent_load_bench"),
    Bench("agent_node_bench", (control_plane, real_node)),
    Bench("cluster_bench", (control_plane,)),
    Bench("burst_bench", (control_plane,)),
    Bench("mixed_burst"),
    Bench("mixed_cluster_bench", (control_plane,)),
    Bench("peak_bench", (control_plane,)),
)


def run_module(module: str) -> int:
    return subprocess.run([sys.executable, "-m", f"bench.{module}"], check=False).returncode


def run_all(benches: Sequence[Bench], run: Callable[[str], int] = run_module) -> int:
    skipped: list[str] = []
    failed: list[str] = []
    for bench in benches:
        missing = bench.missing()
        print(f"== bench.{bench.module}", flush=True)
        if missing:
            print(f"not run, missing: {'; '.join(missing)}", flush=True)
            skipped.append(bench.module)
            continue
        if run(bench.module) != 0:
            failed.append(bench.module)
    ran = len(benches) - len(skipped)
    print(f"== {ran} of {len(benches)} benches ran", end="")
    print(f"; not run: {', '.join(skipped)}" if skipped else "", end="")
    print(f"; failed: {', '.join(failed)}" if failed else "", flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="run only these benches (module names, e.g. names_bench)")
    args = parser.parse_args(argv)
    unknown = set(args.names) - {b.module for b in BENCHES}
    if unknown:
        parser.error(f"no such bench: {', '.join(sorted(unknown))}")
    return run_all([b for b in BENCHES if not args.names or b.module in args.names])


if __name__ == "__main__":
    sys.exit(main())
