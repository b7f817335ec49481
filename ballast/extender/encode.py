"""The verbs' answers as the bytes kube-scheduler reads: the one place a decision becomes JSON.

The verbs decide in plain values (``ballast.extender.extender``: a filter result, ``Scores``, a preemption
result, a bind error), and the load model (``ballast.model``) knows nothing of JSON; each verb's entry in
the table (``ballast.extender.api.verbs``) names its encoder here. Most answers are one ``orjson.dumps``.
Prioritize's, sent for every pod, is joined from fragments kept per node (``ScoreAnswers``).
"""

from __future__ import annotations

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
"""Up to this many names the board does not know, an answer still comes from fragments (theirs made for
it alone); more (a flood of unknown names, a whole-node request the cache does not cover) go to orjson."""
STALE = 64
"""Nodes the board forgot whose fragments may stay kept; past them, the next answer naming a node without
fragments drops every one the board forgot."""


class ScoreAnswers:
    """Prioritize's answers, joined from fragments (``fragments``): a tuple index per candidate and one
    join, against a dict built and encoded per candidate.

    Fragments are kept for the nodes the names-mode verdict board knows (``board``; without one, every
    answer is encoded by orjson), made the first time an answer names one, and dropped once the board has
    forgotten them. Used from the event loop's thread; another thread's answer would at worst make a
    node's fragments twice."""

    def __init__(self, board: VerdictBoard | None) -> None:
        self.board = board
        self._kept: dict[str, tuple[bytes, ...]] = {}

    def __call__(self, answer: Scores) -> bytes:
        hosts = answer.hosts
        if self.board is None or len(hosts) > FRAGMENTS_UP_TO:
            return _fresh(answer)
        frags = list(map(self._kept.get, hosts))  # C-level; None for a node without fragments yet
        if None in frags:
            frags = self._made(hosts, frags)
            if frags is None:
                return _fresh(answer)
        # a comprehension's tuple index is cheaper than calling tuple.__getitem__ through map
        return b"[" + b",".join([f[s] for f, s in zip(frags, answer.scores, strict=True)]) + b"]"

    def _made(
        self, hosts: list[str], frags: list[tuple[bytes, ...] | None]
    ) -> list[tuple[bytes, ...]] | None:
        """``frags`` completed: fragments made (and kept) for the board's nodes, made for this answer alone
        for a few it does not know; ``None`` when there are more of those (orjson encodes the answer)."""
        assert self.board is not None
        known = self.board.derived
        kept = self._kept
        for host in [h for f, h in zip(frags, hosts, strict=True) if f is None]:
            if host in known and host not in kept:
                kept[host] = fragments(host)
        if len(kept) > len(known) + STALE:
            self._kept = kept = {h: f for h, f in kept.items() if h in known}
        frags = list(map(kept.get, hosts))
        if None not in frags:
            return frags  # type: ignore[return-value]
        if frags.count(None) > FEW_UNKNOWN:
            return None
        return [f if f is not None else fragments(h) for f, h in zip(frags, hosts, strict=True)]


def _fresh(answer: Scores) -> bytes:
    return orjson.dumps([{"Host": h, "Score": s} for h, s in zip(answer.hosts, answer.scores, strict=True)])
