"""Prioritize's answers from kept fragments are the bytes orjson makes of the same answer, whatever mix of
names the board knows and does not; fragments are kept only for the board's nodes, and go when it forgets
them."""

from __future__ import annotations

import orjson
import pytest

from ballast.extender import encode
from ballast.extender.encode import FEW_UNKNOWN, STALE, ScoreAnswers
from ballast.extender.wire import Scores
from ballast.model.ledger import Ledger
from ballast.model.nodestate import NodeLoad
from ballast.model.policy import load_policy
from ballast.model.verdicts import VerdictBoard
from ballast.testing.parts import POLICY_FILE

POLICY = load_policy(POLICY_FILE)
NOW = 1_800_000_000.0


def board_of(names: list[str]) -> tuple[VerdictBoard, dict[str, NodeLoad]]:
    loads = {n: NodeLoad(n) for n in names}
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
    for round_ in range(3):  # the first answer makes the fragments, the others read them
        scores = [(i * 7 + round_) % 11 for i in range(len(hosts))]
        assert answers(Scores(hosts, scores)) == plain(hosts, scores)


def test_without_a_board_and_past_the_fragments_limit_orjson_encodes(monkeypatch: pytest.MonkeyPatch) -> None:
    hosts, scores = KNOWN, [i % 11 for i in range(len(KNOWN))]
    assert ScoreAnswers(None)(Scores(hosts, scores)) == plain(hosts, scores)
    board, _ = board_of(KNOWN)
    answers = ScoreAnswers(board)
    monkeypatch.setattr(encode, "FRAGMENTS_UP_TO", len(hosts) - 1)
    assert answers(Scores(hosts, scores)) == plain(hosts, scores)
    assert not answers._kept
    assert ScoreAnswers(board)(Scores([], [])) == b"[]"


def test_fragments_are_kept_for_the_board_s_nodes_only_and_go_when_it_forgets_them() -> None:
    names = [f"n{i}" for i in range(2 * STALE)]
    board, loads = board_of(names)
    answers = ScoreAnswers(board)
    answers(Scores([*names, "stray"], [0] * (len(names) + 1)))
    assert set(answers._kept) == set(names)  # not the stray name
    gone = names[: STALE + 1]
    for name in gone:
        del loads[name]
    board.update(gone, NOW)
    answers(Scores(names[STALE + 1 :], [0] * (len(names) - STALE - 1)))  # no new name: nothing pruned
    assert len(answers._kept) == len(names)
    answers(Scores(["new"], [3]))  # a name without fragments (not the board's either): the forgotten go
    assert set(answers._kept) == set(names[STALE + 1 :])
    loads["new"] = NodeLoad("new")
    board.update(["new"], NOW)
    assert answers(Scores(["new"], [3])) == b'[{"Host":"new","Score":3}]'
    assert set(answers._kept) == set(names[STALE + 1 :]) | {"new"}
