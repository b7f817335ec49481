"""The verdict board is an optimisation: it must give exactly what check_node/score_node give (directly, and
through the extender against ``tests.oracle``)."""

from __future__ import annotations

import dataclasses

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ballast.contract.annotations import format_hot_value, format_load
from ballast.extender import encode as encode_module
from ballast.extender.encode import ScoreAnswers
from ballast.extender.extender import Extender
from ballast.extender.metrics import ExtenderMetrics
from ballast.extender.wire import ExtenderArgs, Scores
from ballast.model.ledger import Ledger
from ballast.model.load import check_node, projected_load, score_node
from ballast.model.nodestate import NodeState, parse_node
from ballast.model.podinfo import PodDemand
from ballast.model.policy import load_policy
from ballast.model.policy_store import PolicyStore
from ballast.model.verdicts import CPU_TIERS, MEMORY_TIERS, UNSURE, VerdictBoard, derive, judge
from ballast.testing.node_source import StaticSource
from ballast.testing.parts import POLICY_FILE
from tests.oracle import Oracle

POLICY = load_policy(POLICY_FILE)
CRANE = dataclasses.replace(POLICY, scoring="crane")
NOW = 1_800_000_000.0
METRICS = list(POLICY.sync_periods)

sample = st.one_of(st.none(), st.tuples(st.floats(0, 1), st.floats(0, 4 * 3600)))
node_st = st.fixed_dictionaries(
    {
        "values": st.fixed_dictionaries({m: sample for m in METRICS}),
        "hot": st.one_of(st.none(), st.tuples(st.integers(0, 5), st.floats(0, 600))),
        "cpu": st.sampled_from([None, 2000, 3920, 7910, 64000]),
        "mem": st.sampled_from([None, 8 << 30, 32 << 30]),
    }
)
pod_st = st.tuples(st.integers(0, 8000), st.integers(0, 16 << 30))
estimates_st = st.lists(st.tuples(pod_st, st.floats(0, 1200), st.booleans()), max_size=5)


def decoded(answers: ScoreAnswers, answer: Scores) -> list:
    """prioritize's answer as the HTTP layer sends it (``ballast.extender.encode``: from fragments where it
    can), decoded to compare the values."""
    return orjson.loads(answers(answer))


def make_load(name: str, spec: dict) -> NodeState:
    ann = {m: format_load(v, NOW - age) for m, s in spec["values"].items() if s is not None for v, age in [s]}
    if spec["hot"] is not None:
        ann["node_hot_value"] = format_hot_value(spec["hot"][0], NOW - spec["hot"][1])
    alloc = {}
    if spec["cpu"]:
        alloc["cpu"] = f"{spec['cpu']}m"
    if spec["mem"]:
        alloc["memory"] = str(spec["mem"])
    return parse_node(
        {"metadata": {"name": name, "annotations": ann}, "status": {"allocatable": alloc}}, POLICY, NOW
    )


def info(uid: str, cpu: int, mem: int) -> PodDemand:
    return PodDemand("ns", uid, uid, False, cpu, cpu, mem, mem)


@given(spec=node_st, estimates=estimates_st, pod=pod_st)
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
def test_judge_equals_check_node(spec, estimates, pod) -> None:
    load = make_load("n", spec)
    ledger = Ledger(POLICY, clock=lambda: NOW)
    for i, ((cpu, mem), age, tentative) in enumerate(estimates):
        p = info(f"e{i}", cpu, mem)
        if tentative:
            ledger.hold(p, "n", NOW - min(age, 29))
        else:
            ledger.bound(p, p.uid, "n", NOW - age)
    d = derive(load, POLICY, ledger, NOW)
    incoming = ledger.incoming(info("in", *pod), NOW)
    exact = check_node(load, POLICY, NOW, ledger.extra(load, NOW, incoming))
    fast = judge(d, incoming.cpu_milli, incoming.memory_bytes, NOW)
    if fast is not UNSURE:
        assert (fast.reason if fast else None) == (exact.reason if exact else None)
    assert d.score == 0  # relative scoring (the default) ranks by projected load: crane's score unused
    crane = derive(load, CRANE, ledger, NOW)
    assert crane.score == score_node(load, CRANE, NOW, ledger.extra(load, NOW)).score
    # relative scoring: the board's standing load plus the pod's slope is the exact load after the pod
    size = (incoming.cpu_milli, incoming.memory_bytes)
    exact_after = projected_load(load, POLICY, NOW, ledger.extra(load, NOW), size)
    base, per_cpu, per_byte = d.projection
    if exact_after is None:
        assert base is None
    else:
        fast_after = base + incoming.cpu_milli * per_cpu + incoming.memory_bytes * per_byte
        assert fast_after == pytest.approx(exact_after, rel=1e-9, abs=1e-12)
    assert d.blocked == (check_node(load, POLICY, NOW, ledger.extra(load, NOW)) is not None)


@given(
    specs=st.lists(node_st, min_size=1, max_size=12),
    pods=st.lists(pod_st, min_size=1, max_size=6),
    changes=st.lists(st.tuples(st.integers(0, 11), node_st), max_size=4),
)
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@pytest.mark.parametrize("deferred", [False, True], ids=["settled", "deferred"])
@pytest.mark.parametrize("scoring", ["relative", "crane"])
@pytest.mark.parametrize("dominant", [POLICY.dominant_resource_weight, 0.0], ids=["shipped", "no-dominant"])
def test_board_filter_and_prioritize_equal_the_oracle(
    scoring, dominant, deferred, specs, pods, changes
) -> None:
    """A burst through the board-backed extender answers exactly as the definition, node by node
    (``tests.oracle``): each pod asked twice (the second time the board's memo answers, and the pod's own
    hold is scored exactly), with nodes changing between pods (a changed node must leave the memo).
    ``deferred``: the verbs run as the HTTP layer runs them (``answering``: the board takes in their holds
    at ``settle``, here only after every seventh answer, so reads meet nodes still pending). ``dominant``:
    with the shipped dominantResourceWeight and without (the board's two ways of ranking)."""
    policy = dataclasses.replace(POLICY, scoring=scoring, dominant_resource_weight=dominant)
    loads = {f"n{i}": make_load(f"n{i}", s) for i, s in enumerate(specs)}
    names = [*loads, "unknown"]
    fast = Extender(
        PolicyStore(policy), ExtenderMetrics(), StaticSource(loads), Ledger(policy, lambda: NOW), lambda: NOW
    )
    oracle = Oracle(loads, policy, NOW)
    answers = ScoreAnswers(fast.board)
    calls = 0
    for i, (cpu, mem) in enumerate(pods):
        pod = {
            "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}"},
            "spec": {"containers": [{"resources": {"requests": {"cpu": f"{cpu}m", "memory": str(mem)}}}]},
        }
        args = ExtenderArgs(pod, None, names)

        def ask(verb, *a, **kw):
            nonlocal calls
            if not deferred:
                return verb(*a, **kw)
            calls += 1
            answer = fast.answering(verb, *a, **kw)
            if calls % 7 == 0:
                fast.settle()
            return answer

        for _ in range(2):
            assert ask(fast.filter, args) == oracle.filter(pod, names)
            expected = oracle.prioritize(pod, names)
            assert decoded(answers, ask(fast.prioritize, args)) == expected
            assert ask(fast.prioritize, args).entries() == expected  # as values (names it lacks too)
        if i < len(changes):
            index, spec = changes[i]
            name = f"n{index % len(specs)}"
            loads[name] = make_load(name, spec)
            assert fast.board is not None
            fast.board.update([name], NOW)


@given(specs=st.lists(node_st, min_size=1, max_size=12), pods=st.lists(pod_st, min_size=1, max_size=4))
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_relative_answer_is_the_same_bytes_from_fragments_and_from_fresh_dicts(specs, pods) -> None:
    """Large answers are encoded from fresh dicts instead of the encoder's fragments
    (``ballast.extender.encode.FRAGMENTS_UP_TO``): both give the same bytes, for names the board lacks and a
    pod asked twice."""
    loads = {f"n{i}": make_load(f"n{i}", s) for i, s in enumerate(specs)}
    names = [*loads, "unknown"]
    answers: dict[int, list[bytes]] = {}
    for up_to in (len(names), 0):  # every request from fragments, then every one from dicts
        ext = Extender(
            PolicyStore(POLICY),
            ExtenderMetrics(),
            StaticSource(loads),
            Ledger(POLICY, lambda: NOW),
            lambda: NOW,
        )
        answers_of = ScoreAnswers(ext.board)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(encode_module, "FRAGMENTS_UP_TO", up_to)
            for i, (cpu, mem) in enumerate(pods):
                pod = {
                    "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}"},
                    "spec": {
                        "containers": [{"resources": {"requests": {"cpu": f"{cpu}m", "memory": str(mem)}}}]
                    },
                }
                for _ in range(2):
                    answer = answers_of(ext.answering(ext.prioritize, ExtenderArgs(pod, None, names)))
                    ext.settle()
                    answers.setdefault(up_to, []).append(answer)
    assert answers[len(names)] == answers[0]
    assert all(isinstance(a, bytes) for a in answers[0])


def test_board_recomputes_when_values_expire() -> None:
    clock = [NOW]
    load = make_load("n", {"values": {"cpu_usage_avg_5m": (0.9, 0)}, "hot": None, "cpu": 4000, "mem": None})
    ledger = Ledger(POLICY, clock=lambda: clock[0])
    board = VerdictBoard({"n": load}.get, lambda: POLICY, ledger)
    board.rebuild(["n"], clock[0])
    assert board.derived["n"].blocked and "n" in board.blocked
    clock[0] = NOW + 3 * 60 + 5 * 60 + 1  # the 5m value is stale after period 3m + 5m
    board.refresh(clock[0])
    assert not board.derived["n"].blocked and "n" not in board.blocked


def node_object(name: str, spec: dict, rv: str) -> dict:
    ann = {m: format_load(v, NOW - age) for m, s in spec["values"].items() if s is not None for v, age in [s]}
    if spec["hot"] is not None:
        ann["node_hot_value"] = format_hot_value(spec["hot"][0], NOW - spec["hot"][1])
    alloc = {}
    if spec["cpu"]:
        alloc["cpu"] = f"{spec['cpu']}m"
    if spec["mem"]:
        alloc["memory"] = str(spec["mem"])
    return {
        "metadata": {"name": name, "resourceVersion": rv, "annotations": ann},
        "status": {"allocatable": alloc},
    }


@given(specs=st.lists(node_st, min_size=1, max_size=10), pods=st.lists(pod_st, min_size=1, max_size=5))
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
def test_whole_node_mode_equals_the_oracle(specs, pods) -> None:
    """Whole-node requests go through the request board; verdicts, reasons and scores equal the
    definition (``tests.oracle``)."""
    objects = [node_object(f"n{i}", s, str(i + 1)) for i, s in enumerate(specs)]
    loads = {o["metadata"]["name"]: parse_node(o, POLICY, NOW) for o in objects}
    fast = Extender(PolicyStore(POLICY), ExtenderMetrics(), None, Ledger(POLICY, lambda: NOW), lambda: NOW)
    oracle = Oracle(loads, POLICY, NOW)
    for i, (cpu, mem) in enumerate(pods):
        pod = {
            "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}"},
            "spec": {"containers": [{"resources": {"requests": {"cpu": f"{cpu}m", "memory": str(mem)}}}]},
        }
        a = fast.filter(ExtenderArgs(pod, objects, None))
        b = oracle.filter(pod, list(loads))
        assert a["FailedNodes"] == b["FailedNodes"]
        assert [n["metadata"]["name"] for n in a["Nodes"]["items"]] == b["NodeNames"]
        assert all(
            n is objects[int(n["metadata"]["name"][1:])] for n in a["Nodes"]["items"]
        )  # unchanged objects
        scores = fast.prioritize(ExtenderArgs(pod, objects, None))
        assert scores.entries() == oracle.prioritize(pod, list(loads))


def test_memo_never_keeps_a_verdict_older_than_the_node() -> None:
    """Verdicts worked out before a node changed are not recorded, and a change drops recorded ones."""
    load = make_load("n", {"values": {"cpu_usage_avg_5m": (0.9, 0)}, "hot": None, "cpu": 4000, "mem": None})
    loads = {"n": load}
    board = VerdictBoard(loads.get, lambda: POLICY, Ledger(POLICY, clock=lambda: NOW))
    board.rebuild(["n"], NOW)
    memo = board.memo(250, 0, round(NOW))
    before = board.generation
    board.update(["n"], NOW)  # the watch thread recomputes n while a request is judging it
    board.record(memo, before, {"n": ("stale reason", "cpu_usage_avg_5m")}, set())
    assert memo.failed == {}
    board.record(memo, board.generation, {"n": ("fresh reason", "cpu_usage_avg_5m")}, set())
    assert memo.failed == {"n": ("fresh reason", "cpu_usage_avg_5m")}
    board.update(["n"], NOW)
    assert memo.failed == {}
    assert board.memo(250, 0, round(NOW) + 1) is not memo  # a new second starts over


def _standing(d) -> tuple:
    """What a request reads of a node's standing verdict (a missing value's check carries the time it was
    worked out, which no answer reads)."""

    def checks(cs) -> list[tuple]:
        return [dataclasses.replace(c, timestamp=0.0) if c.resource == 3 else c for c in cs]

    return (
        d.blocked,
        d.score,
        d.cpu_room,
        d.memory_room,
        d.projection,
        d.until,
        d.units,
        checks(d.checks),
        checks(d.prod_checks),
    )


@given(
    specs=st.lists(node_st, min_size=1, max_size=4),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["hold", "bind-there", "bind-elsewhere", "forget"]),
            st.integers(0, 5),
            st.integers(0, 3),
            pod_st,
            st.floats(0, 200),
        ),
        max_size=12,
    ),
)
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
def test_a_board_following_the_ledger_equals_a_recomputation(specs, ops) -> None:
    """Holds, binds (on the hold's node and elsewhere) and forgets with time moving on: after each, every
    node's standing verdict on the board (kept when the change moved nothing it depends on, else worked out
    again) equals one worked out from scratch, expiry included; the tight sets and the loads kept per pod
    size follow."""
    clock = [NOW]
    loads = {f"n{i}": make_load(f"n{i}", s) for i, s in enumerate(specs)}
    ledger = Ledger(POLICY, clock=lambda: clock[0])
    board = VerdictBoard(loads.get, lambda: POLICY, ledger)
    ledger.listeners.append(lambda nodes: board.update(nodes, clock[0], estimates_only=True))
    board.rebuild(list(loads), clock[0])
    sizes = [(250, 256 << 20), (1000, 0), (0, 1 << 30)]
    for cpu, mem in sizes:
        board.loads_for(cpu, mem)  # kept from here on, as the nodes change
    for op, pod, node, (cpu, mem), dt in ops:
        clock[0] += dt
        p, name = info(f"p{pod}", cpu, mem), f"n{node % len(loads)}"
        held = ledger.known(p.uid)
        if op == "hold":
            ledger.hold(p, name, clock[0])
        elif op == "bind-there" and held is not None:
            ledger.bound(None, p.uid, held.node, clock[0], p.uid, size=(held.cpu_milli, held.memory_bytes))
        elif op == "bind-elsewhere":
            ledger.bound(p, p.uid, name, clock[0], p.uid)
        elif op == "forget":
            ledger.forget(p.uid)
        board.refresh(clock[0])
        for n, load in loads.items():
            assert _standing(board.derived[n]) == _standing(derive(load, POLICY, ledger, clock[0])), n
        for n, d in board.derived.items():
            for room, tiers, sets in (
                (d.cpu_room, CPU_TIERS, board.tight_cpu),
                (d.memory_room, MEMORY_TIERS, board.tight_memory),
            ):
                assert [n in members for members in sets] == [room < t for t in tiers], n
        for cpu, mem in sizes:
            with_pod = {
                n: None if b is None else b + cpu * c + mem * m for n, (b, c, m) in board.projection.items()
            }
            assert board.loads_for(cpu, mem) == with_pod


def _one_node_following_the_ledger(clock: list[float]) -> tuple[NodeState, Ledger, VerdictBoard]:
    """Node ``n`` (cpu_usage_avg_5m at 0.5 of 4000m), a ledger on ``clock[0]``, and a board over ``n``
    that follows the ledger's estimates, as the extender's names-mode board does."""
    load = make_load("n", {"values": {"cpu_usage_avg_5m": (0.5, 0)}, "hot": None, "cpu": 4000, "mem": None})
    ledger = Ledger(POLICY, clock=lambda: clock[0])
    board = VerdictBoard({"n": load}.get, lambda: POLICY, ledger)
    ledger.listeners.append(lambda nodes: board.update(nodes, clock[0], estimates_only=True))
    board.rebuild(["n"], clock[0])
    return load, ledger, board


def test_a_bind_on_the_node_of_its_hold_works_nothing_out_again(monkeypatch) -> None:
    """The bind of a pod where its hold is moves an estimate of the same size from hold to placement: the
    node's verdicts, score and rooms stand (only their expiry moves), and the board works nothing out."""
    from ballast.model import verdicts

    clock = [NOW]
    load, ledger, board = _one_node_following_the_ledger(clock)
    ledger.hold(info("p", 500, 1 << 20), "n", clock[0])
    held, generation = board.derived["n"], board.generation
    worked_out = []
    monkeypatch.setattr(verdicts, "derive", lambda *a: worked_out.append(a) or derive(*a))
    clock[0] += 1
    hold = ledger.known("p")
    assert hold is not None
    ledger.bound(None, "p", "n", clock[0], "ns/p", size=(hold.cpu_milli, hold.memory_bytes))  # as bind does
    assert worked_out == [] and board.generation == generation
    d = board.derived["n"]
    assert (d.score, d.cpu_room, d.blocked) == (held.score, held.cpu_room, held.blocked)
    assert d.until == derive(load, POLICY, ledger, clock[0]).until > held.until  # the placement stays longer
    clock[0] = d.until
    board.refresh(clock[0])  # the expiry still comes: the node is worked out again
    assert len(worked_out) == 1 and board.derived["n"].checks == ()  # the 5m value went stale


def test_a_hold_reads_the_nodes_estimates_once(monkeypatch) -> None:
    """A hold changes the amounts counted on its node, so the standing verdict cannot stand and the node is
    worked out again: from the one reading of the ledger that showed the change, not from a second one
    (the node's estimates are what a recomputation mostly reads). The result equals one from scratch."""
    clock = [NOW]
    load, ledger, board = _one_node_following_the_ledger(clock)
    ledger.hold(info("a", 500, 1 << 20), "n", clock[0])
    readings = []
    units, standing = ledger.standing_units, ledger.standing
    monkeypatch.setattr(ledger, "standing_units", lambda *a: readings.append(a) or units(*a))
    monkeypatch.setattr(ledger, "standing", lambda *a: readings.append(a) or standing(*a))
    clock[0] += 1
    ledger.hold(info("b", 250, 1 << 20), "n", clock[0])
    assert len(readings) == 1
    assert _standing(board.derived["n"]) == _standing(derive(load, POLICY, ledger, clock[0]))


def test_a_board_leaves_alone_a_node_it_does_not_hold() -> None:
    """Every board hears every estimate change; one that never worked a node out (the whole-node board,
    while names-mode requests hold estimates on the cache's nodes) has nothing of it to change: no work,
    and no new generation that would make the requests in flight drop what they worked out."""
    clock = [NOW]
    _, ledger, names_board = _one_node_following_the_ledger(clock)
    other_board = VerdictBoard({}.get, lambda: POLICY, ledger)
    ledger.listeners.append(lambda nodes: other_board.update(nodes, clock[0], estimates_only=True))
    other_board.rebuild([], clock[0])
    before = (names_board.generation, other_board.generation)
    ledger.hold(info("a", 500, 1 << 20), "n", clock[0])
    assert names_board.generation == before[0] + 1
    assert other_board.generation == before[1] and other_board.derived == {}


def test_a_verdict_that_stands_keeps_every_field_but_its_expiry() -> None:
    """``restand`` copies a standing verdict field by field (cheaper than ``dataclasses.replace``): a field
    added to ``Derived`` and not copied would be lost on every bind, so the copy must equal ``replace``."""
    import dataclasses

    from ballast.model.verdicts import restand

    clock = [NOW]
    load = make_load("n", {"values": {"cpu_usage_avg_5m": (0.5, 0)}, "hot": None, "cpu": 4000, "mem": None})
    ledger = Ledger(POLICY, clock=lambda: clock[0])
    ledger.hold(info("p", 500, 1 << 20), "n", clock[0])
    d = derive(load, POLICY, ledger, clock[0])
    clock[0] += 1
    hold = ledger.known("p")
    assert hold is not None
    ledger.bound(None, "p", "n", clock[0], "ns/p", size=(hold.cpu_milli, hold.memory_bytes))
    kept = restand(d, load, POLICY, ledger, clock[0])
    assert isinstance(kept, type(d)) and kept.until != d.until
    assert kept == dataclasses.replace(d, until=kept.until)


@given(specs=st.lists(node_st, min_size=2, max_size=8), sizes=st.permutations(range(12)))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_many_pod_sizes_rank_as_the_definition(specs, sizes) -> None:
    """A burst of many pod sizes, each asked about again after the others, ranks exactly as the
    definition (the oracle), with holds moving the nodes in between."""
    loads = {f"n{i}": make_load(f"n{i}", s) for i, s in enumerate(specs)}
    names = list(loads)
    fast = Extender(
        PolicyStore(POLICY), ExtenderMetrics(), StaticSource(loads), Ledger(POLICY, lambda: NOW), lambda: NOW
    )
    oracle = Oracle(loads, POLICY, NOW)
    assert fast.board is not None
    answers = ScoreAnswers(fast.board)
    for round_ in range(2):
        for k in sizes:
            i = round_ * 100 + k
            pod = {
                "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}"},
                "spec": {
                    "containers": [
                        {
                            "resources": {
                                "requests": {"cpu": f"{100 + 300 * k}m", "memory": str((64 + 256 * k) << 20)}
                            }
                        }
                    ]
                },
            }
            expected = oracle.prioritize(pod, names)
            assert decoded(answers, fast.prioritize(ExtenderArgs(pod, None, names))) == expected
