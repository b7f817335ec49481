"""Shadow mode's record of what Ballast would have chosen, and how the scheduler's choice compares.

In shadow mode (``spec.mode: shadow``) prioritize answers every candidate the same score, so kube-scheduler
places the pod by its own plugins alone. Before answering, the verb notes here the candidates Ballast would
have favoured (its top score) and their projected load after the pod. When the pod is seen bound (the pod
watch), the scheduler's node is compared with that note:

- ``ballast_extender_shadow_choices_total{agreed="true"|"false"}``: whether the chosen node was among
  Ballast's favourites;
- ``ballast_extender_shadow_chosen_load_excess``: how much higher the chosen node's projected load
  (``ballast.model.load.projected_load``, with the pod's estimate) was than the favourite's, 0 when they
  agree.
  The chosen node's load is read when the bind is seen, from the same standing projections, so what the
  histogram shows is what turning Ballast on would have changed for that pod.

When more than ``MAX_FAVOURED`` candidates tie at the top (typically: no node is measured), Ballast has no
preference and any choice agrees. The book is bounded in size and age: a pod kube-scheduler never binds
(it failed elsewhere, or was deleted) leaves no trace after ``TTL_SECONDS``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MAX_FAVOURED = 64
CAP = 4096
TTL_SECONDS = 600.0
EXCESS_BUCKETS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
"""Load ratios (0.1 = 10 percentage points more load on the chosen node than on Ballast's choice)."""


@dataclass(frozen=True, slots=True)
class ShadowChoice:
    """What Ballast would have chosen for one pod in shadow mode, kept until the pod watch shows where
    kube-scheduler put it."""

    favoured: frozenset[str] | None
    """Ballast's top-scoring candidates; ``None``: no preference (too many tied)."""
    best_load: float | None
    cpu_milli: int
    memory_bytes: int
    at: float


class ShadowBook:
    def __init__(
        self,
        agreed: Callable[[bool], None],
        excess: Callable[[float], None],
        clock: Callable[[], float],
    ) -> None:
        self._agreed = agreed
        self._excess = excess
        self._clock = clock
        self._lock = threading.Lock()
        self._choices: OrderedDict[str, ShadowChoice] = OrderedDict()
        self.load_of: Callable[[str, int, int], float | None] = lambda node, cpu, mem: None
        """The node's standing projected load with a pod of (cpu, mem) added; set by the extender."""

    def __len__(self) -> int:
        return len(self._choices)

    def note(
        self,
        uid: str,
        names: Sequence[str],
        scores: Sequence[int],
        cpu_milli: int,
        memory_bytes: int,
    ) -> ShadowChoice | None:
        """Remember the candidates Ballast would have favoured for pod ``uid``."""
        if not uid or not names:
            return None
        top = max(scores)
        favoured = [n for n, s in zip(names, scores, strict=True) if s == top]
        known = [x for n in favoured if (x := self.load_of(n, cpu_milli, memory_bytes)) is not None]
        choice = ShadowChoice(
            frozenset(favoured) if len(favoured) <= MAX_FAVOURED else None,
            min(known) if known else None,
            cpu_milli,
            memory_bytes,
            self._clock(),
        )
        with self._lock:
            self._choices.pop(uid, None)
            self._choices[uid] = choice
            while len(self._choices) > CAP:
                self._choices.popitem(last=False)
        return choice

    def placed(self, uid: str, node: str) -> bool | None:
        """The pod was bound to ``node``: count whether Ballast agreed; ``None`` when it noted nothing."""
        if not self._choices:
            return None  # nothing noted (always so outside shadow mode): every bound pod passes here
        now = self._clock()
        with self._lock:
            choice = self._choices.pop(uid, None)
            while self._choices:
                oldest = next(iter(self._choices.values()))
                if now - oldest.at <= TTL_SECONDS:
                    break
                self._choices.popitem(last=False)
        if choice is None or now - choice.at > TTL_SECONDS:
            return None
        agreed = choice.favoured is None or node in choice.favoured
        self._agreed(agreed)
        excess = 0.0
        if not agreed and choice.best_load is not None:
            chosen = self.load_of(node, choice.cpu_milli, choice.memory_bytes)
            if chosen is not None:
                excess = max(0.0, chosen - choice.best_load)
        self._excess(excess)
        return agreed
