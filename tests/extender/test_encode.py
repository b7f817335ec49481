"""Prioritize's answers from kept fragments are the bytes orjson makes of the same answer, whatever mix of
names the board knows and does not; fragments are kept for the board's nodes, following its node events."""

from __future__ import annotations

import orjson
import pytest

from ballast.extender import encode
from ballast.extender.encode import FEW_UNKNOWN, ScoreAnswers
from ballast.extender.extender import Extender
from ballast.extender.metrics import ExtenderMetrics
from ballast.extender.wire import Scores
from ballast.model.ledger import Ledger
from ballast.model.nodestate import NodeState
from ballast.model.policy import load_policy
from ballast.model.policy_store import PolicyStore
from ballast.model.verdicts import VerdictBoard
from ballast.testing.node_source import StaticSource
from ballast.testing.parts import POLICY_FILE

POLICY = load_policy(POLICY_FILE)
NOW = 1_800_000_000.0


def board_of(names: list[str]) -> tuple[VerdictBoard, dict[str, NodeState]]:
    loads = {n: NodeState(n) for n in names}
    board = VerdictBoard(loads.get, lambda: POLICY, Ledger(POLICY, lambda: NOW))
    board.rebuild(names, NOW)
    return board, loads


def plain(hosts: list[str], scores: list[int]) -> bytes:
    return orjson.dumps([{"Host": h, "Score": s} for h, s in zip(hosts, scores, strict=True)])


KNOWN = [f"node-{i}" for i in range(40)] + ['odd"name\\é']


@pytest.mark.parametrize("unknown", [0, 1, FEW_UNKNOWN, FEW_UNKNOWN + 1, 100])
def test_every_mix_of_names_is_the_same_bytes_as_orjson(unknown: int) -> None:
    board, _ = board_of(KNOWN)
    answers = ScoreAnswers(board)
    hosts = [*KNOWN, *(f"stray-{i}" for i in range(unknown)), KNOWN[0]]  # a repeated name too
    for round_ in range(3):
        scores = [(i * 7 + round_) % 11 for i in range(len(hosts))]
        assert answers(Scores(hosts, scores)) == plain(hosts, scores)


def test_without_a_board_and_past_the_fragments_limit_orjson_encodes(monkeypatch: pytest.MonkeyPatch) -> None:
    hosts, scores = KNOWN, [i % 11 for i in range(len(KNOWN))]
    assert ScoreAnswers(None)(Scores(hosts, scores)) == plain(hosts, scores)
    board, _ = board_of(KNOWN)
    answers = ScoreAnswers(board)
    monkeypatch.setattr(encode, "FRAGMENTS_UP_TO", len(hosts) - 1)
    assert answers(Scores(hosts, scores)) == plain(hosts, scores)
    assert ScoreAnswers(board)(Scores([], [])) == b"[]"


def test_fragments_follow_the_board_through_node_events() -> None:
    """Made when a node event brings the board a node, dropped when one takes it away, all anew after a
    relist; the encoder hears each event after the Extender (which updates the board) does."""
    source = StaticSource({n: NodeState(n) for n in ("a", "b", "c")})
    ext = Extender(PolicyStore(POLICY), ExtenderMetrics(), source, Ledger(POLICY, lambda: NOW), lambda: NOW)
    answers = ScoreAnswers(ext.board, source.node_listeners)
    assert set(answers._kept) == {"a", "b", "c"}  # the board's nodes when it is made

    def event(kind: str, name: str | None) -> None:
        for listener in source.node_listeners:
            listener(kind, None if name is None else {"metadata": {"name": name}})

    assert answers(Scores(["a", "stray"], [1, 2])) == plain(["a", "stray"], [1, 2])
    assert set(answers._kept) == {"a", "b", "c"}  # a stray name's fragments are made for its answer alone
    del source.loads["b"]
    event("DELETED", "b")
    source.loads["d"] = NodeState("d")
    event("ADDED", "d")
    assert set(answers._kept) == {"a", "c", "d"}
    kept = answers._kept["a"]
    source.loads.clear()
    source.loads.update({n: NodeState(n) for n in ("a", "e")})
    event("REPLACE", None)
    assert set(answers._kept) == {"a", "e"} and answers._kept["a"] is kept
    assert answers(Scores(["e", "a"], [10, 0])) == plain(["e", "a"], [10, 0])
