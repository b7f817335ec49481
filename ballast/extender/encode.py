"""The verbs' answers as the bytes kube-scheduler reads: the one place a decision becomes JSON.

The verbs decide in plain values (``ballast.extender.extender``: a filter result, ``Scores``, a preemption
result, a bind error), and the load model (``ballast.model``) knows nothing of JSON; each verb's entry in
the table (``ballast.extender.api.verbs``) names its encoder here. Most answers are one ``orjson.dumps``.
Prioritize's, sent for every pod, is joined from fragments kept per node (``ScoreAnswers``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from ballast.extender.wire import Scores
from ballast.model.load import MAX_EXTENDER_SCORE
from ballast.model.verdicts import VerdictBoard


def dumps(answer: Any) -> bytes:
    """An answer that is plain data (filter's, preempt's, bind's)."""
    return orjson.dumps(answer)


_SCORES = tuple(f"{n}}}".encode() for n in range(MAX_EXTENDER_SCORE + 1))


def fragments(name: str) -> tuple[bytes, ...]:
    """``{"Host":name,"Score":n}`` encoded for n = 0..10, so a score's bytes are a tuple index.

    Built by concatenation, so each is a bytes object of its own size: ``orjson.dumps`` results keep
    orjson's 4 KiB output buffer (orjson 3.13), and eleven of them per node held ~50 KiB per known node
    (1.1 GiB at the 20 000 remembered nodes, against the shipped 1 Gi limit)."""
    head = b'{"Host":' + orjson.dumps(name) + b',"Score":'
    return tuple(head + tail for tail in _SCORES)


FRAGMENTS_UP_TO = 2000
"""Up to this many candidates an answer is joined from fragments; above, orjson encodes fresh
``{"Host", "Score"}`` dicts (the same bytes). Measured on a busy 2-core machine, the fragments are faster up
to about 2000 names (500: 57 against 90 us) and slower beyond, once their working set (eleven encoded
answers per node) no longer stays in the CPU cache (5000: median 6.1 against 1.5 ms)."""
FEW_UNKNOWN = 8
"""Up to this many names without fragments, an answer still comes from fragments (theirs made for it
alone); more (a flood of unknown names, a whole-node request the cache does not cover) go to orjson."""

NodeListener = Callable[[str, dict[str, Any] | None], None]


class ScoreAnswers:
    """Prioritize's answers, joined from fragments (``fragments``): a tuple index per candidate and one
    join, against a dict built and encoded per candidate.

    Fragments are kept for the nodes of the names-mode verdict board (``board``; without one, every answer
    is encoded by orjson), made when a node event brings the board a node and dropped when one takes it
    away, not while kube-scheduler waits for an answer. ``node_listeners`` are the cache's: this one is
    appended after the ``Extender``'s own (it is made from that Extender), so the board has taken an event
    in when it runs. Both run on the event loop's thread, as the verbs do."""

    def __init__(self, board: VerdictBoard | None, node_listeners: list[NodeListener] | None = None) -> None:
        self.board = board
        self._kept: dict[str, tuple[bytes, ...]] = {}
        if board is not None:
            self._node_changed("REPLACE", None)
            if node_listeners is not None:
                node_listeners.append(self._node_changed)

    def _node_changed(self, event_type: str, obj: dict[str, Any] | None) -> None:
        """Follow the board: every node after a relist (``obj`` is ``None``), else the event's node."""
        assert self.board is not None
        known = self.board.derived
        kept = self._kept
        if obj is None:
            self._kept = {name: kept.get(name) or fragments(name) for name in list(known)}
            return
        name = obj["metadata"]["name"]
        if name not in known:
            kept.pop(name, None)
        elif name not in kept:
            kept[name] = fragments(name)

    def __call__(self, answer: Scores) -> bytes:
        hosts = answer.hosts
        if self.board is None or len(hosts) > FRAGMENTS_UP_TO:
            return _fresh(answer)
        frags = list(map(self._kept.get, hosts))  # C-level; None for a name without fragments
        if None in frags:
            if frags.count(None) > FEW_UNKNOWN:
                return _fresh(answer)
            frags = [f if f is not None else fragments(h) for f, h in zip(frags, hosts, strict=True)]
        # a comprehension's tuple index is cheaper than calling tuple.__getitem__ through map
        return b"[" + b",".join([f[s] for f, s in zip(frags, answer.scores, strict=True)]) + b"]"


def _fresh(answer: Scores) -> bytes:
    return orjson.dumps([{"Host": h, "Score": s} for h, s in zip(answer.hosts, answer.scores, strict=True)])
