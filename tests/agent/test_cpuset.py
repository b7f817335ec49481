"""CPUSet: the kubelet/kernel cpulist format, set algebra, immutability."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ballast.agent.cpuset import MAX_CPU_ID, CPUSet, CPUSetParseError

cpu_ids = st.frozensets(st.integers(min_value=0, max_value=300), max_size=64)


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("", []),
        ("\n", []),
        ("0", [0]),
        ("96", [96]),
        ("0-3,8-11", [0, 1, 2, 3, 8, 9, 10, 11]),
        ("2-3,14-15", [2, 3, 14, 15]),
        ("1-1", [1]),
        ("0-1\n", [0, 1]),
        ("5,1,3", [1, 3, 5]),
        ("0-2,1-4", [0, 1, 2, 3, 4]),
        ("007", [7]),
    ],
)
def test_parse(text: str, ids: list[int]) -> None:
    assert CPUSet.parse(text).sorted() == ids


@pytest.mark.parametrize(
    ("ids", "text"),
    [
        ([], ""),
        ([96], "96"),
        ([0, 1, 2, 3, 8, 9, 10, 11], "0-3,8-11"),
        ([2, 3, 14, 15], "2-3,14-15"),
        ([0, 2, 4], "0,2,4"),
        ([0, 1, 3], "0-1,3"),
        ([7, 1, 2, 3], "1-3,7"),
    ],
)
def test_str_is_canonical(ids: list[int], text: str) -> None:
    assert str(CPUSet(ids)) == text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("3-1", "invalid range '3-1' (3 > 1)"),
        ("-1", "negative CPU id in '-1'"),
        ("-1-3", "empty CPU id"),
        ("1,-2", "negative CPU id in '-2'"),
        ("a", "'a' in 'a' is not a CPU id"),
        ("1,,2", "empty CPU id in ''"),
        ("1,", "empty CPU id"),
        ("3-", "empty CPU id in '3-'"),
        ("1-2-3", "'2-3' in '1-2-3' is not a CPU id"),
        (" 1", "' 1' in ' 1' is not a CPU id"),
        ("+1", "'+1'"),
        ("1_000", "'1_000'"),
        ("\u0663", "is not a CPU id"),  # ARABIC-INDIC DIGIT THREE: int() would take it
        ("0-99999999999", f"is above {MAX_CPU_ID}"),
    ],
)
def test_parse_errors_quote_the_input_and_say_why(text: str, why: str) -> None:
    with pytest.raises(CPUSetParseError) as err:
        CPUSet.parse(text)
    message = str(err.value)
    assert repr(text) in message
    assert why in message
    assert isinstance(err.value, ValueError)


def test_parse_rejects_non_strings() -> None:
    with pytest.raises(CPUSetParseError, match="expected a string"):
        CPUSet.parse(5)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 1.0, "1", True, None])
def test_constructor_rejects_non_ids(bad: object) -> None:
    with pytest.raises(ValueError, match="non-negative integers"):
        CPUSet([0, bad])  # type: ignore[list-item]


def test_algebra_and_queries() -> None:
    a, b = CPUSet.parse("0-5"), CPUSet.parse("4-9")
    assert a | b == CPUSet.parse("0-9")
    assert a & b == CPUSet.of(4, 5)
    assert a - b == CPUSet.parse("0-3")
    assert a.union(b, CPUSet.of(20)) == CPUSet.parse("0-9,20")
    assert a.intersection(b) == CPUSet.of(4, 5)
    assert a.difference(b, CPUSet.of(0)) == CPUSet.parse("1-3")
    assert CPUSet.of(1, 2).issubset(a)
    assert not b.issubset(a)
    assert a.issuperset(CPUSet.of(0))
    assert a.isdisjoint(CPUSet.of(6, 7))
    assert len(a) == 6
    assert 5 in a
    assert 6 not in a
    assert not CPUSet()
    assert CPUSet.of(0)
    assert list(CPUSet.of(9, 3, 5)) == [3, 5, 9]
    assert CPUSet.of(9, 3).sorted() == [3, 9]
    assert CPUSet.of(3).as_frozenset() == frozenset({3})


def test_mixing_with_other_types_is_refused() -> None:
    with pytest.raises(TypeError):
        CPUSet.of(1) | frozenset({2})  # type: ignore[operator]
    assert CPUSet.of(1) != frozenset({1})
    assert CPUSet.of(1) != "1"


def test_immutable_and_hashable() -> None:
    s = CPUSet.of(1, 2)
    with pytest.raises(AttributeError, match="immutable"):
        s._cpus = frozenset()  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        del s._cpus
    assert len({CPUSet.of(1, 2), CPUSet.parse("1-2"), CPUSet.of(3)}) == 2
    assert {CPUSet.parse("1-2"): "x"}[s] == "x"


def test_copy_and_pickle_roundtrip() -> None:
    s = CPUSet.parse("0-3,8")
    assert pickle.loads(pickle.dumps(s)) == s
    assert copy.deepcopy(s) == s
    assert repr(s) == "CPUSet.parse('0-3,8')"


@given(cpu_ids)
def test_parse_of_str_roundtrips(ids: frozenset[int]) -> None:
    s = CPUSet(ids)
    assert CPUSet.parse(str(s)) == s
    assert CPUSet.parse(str(s) + "\n") == s


@given(cpu_ids)
def test_str_is_sorted_runs(ids: frozenset[int]) -> None:
    text = str(CPUSet(ids))
    expanded: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        if hi:
            assert int(hi) - int(lo) >= 1  # runs of two or more only
        expanded.extend(range(int(lo), int(hi or lo) + 1))
    assert expanded == sorted(ids)


@given(cpu_ids, cpu_ids)
def test_algebra_matches_frozenset(a: frozenset[int], b: frozenset[int]) -> None:
    x, y = CPUSet(a), CPUSet(b)
    assert (x | y).as_frozenset() == a | b
    assert (x & y).as_frozenset() == a & b
    assert (x - y).as_frozenset() == a - b
    assert x.issubset(y) == (a <= b)
    assert (x == y) == (a == b)
    assert list(x | y) == sorted(a | b)
