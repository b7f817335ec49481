"""Memory the extender keeps per known node stays under a stated bound (``bench/memory_bench.py``).

Whole-node mode remembers up to 20 000 nodes; at 50 KiB each (orjson's 4 KiB output buffers kept by
eleven pre-encoded score fragments per node) that passed the shipped 1 Gi limit. The figure is what the
extender's own code allocated and still holds after a filter and a prioritize of 2000 nodes, traced
exactly (``tracemalloc``), in a fresh process.
"""

from __future__ import annotations

import json
import subprocess
import sys

from ballast.testing.parts import ROOT

BOUND_KIB_PER_NODE = 5.0


def test_memory_per_known_node_stays_under_5_kib() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.memory_bench", "--nodes", "2000", "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=240,
    )
    result = json.loads(out.stdout)
    assert result["known"] == 2000
    assert 0 < result["retained_kib_per_node"] < BOUND_KIB_PER_NODE, result
