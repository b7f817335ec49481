"""How evenly a burst spread: coefficient of variation of projected load, and the ideal it is compared with.

Pure functions, shared by the in-process simulation test and the burst bench against the real scheduler.
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Sequence


def cv(values: Sequence[float]) -> float:
    """Coefficient of variation (population standard deviation over the mean); 0 for an empty or
    all-zero set."""
    mean = statistics.fmean(values) if values else 0.0
    return statistics.pstdev(values) / mean if mean > 0 else 0.0


def water_fill(loads: Sequence[float], amounts: Sequence[float], limit: float | None = None) -> list[float]:
    """Ideal greedy water-filling: each pod, in order, goes to the node whose load after it is lowest
    (among nodes that stay at or under ``limit``); returns the loads after the burst. ``amounts[i]`` is
    pod i's load on a node (a ratio of the node's capacity; equal-sized nodes)."""
    heap = [(load, i) for i, load in enumerate(loads)]
    heapq.heapify(heap)
    out = list(loads)
    for amount in amounts:
        load, i = heap[0]  # the least loaded node is also the least loaded after the pod (equal sizes)
        if limit is not None and load + amount > limit:
            continue  # no node takes it: the pod stays pending
        out[i] = load + amount
        heapq.heapreplace(heap, (out[i], i))
    return out
