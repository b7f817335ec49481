"""Watches read and applied on an event loop (``ballast.kube.watch_stream``, ``Kube.follow(loop=...)``, a
``Reflector`` with ``loop`` set), against the fake API server (plain HTTP, chunked watches) and a scripted
TLS server, with a real asyncio loop running in a background thread as the extender's would.

- a reflector follows ADDED/MODIFIED/DELETED and its handler runs on the loop's thread;
- a burst of events read in one go is applied in order, at most ``EVENTS_PER_TURN`` per loop turn;
- a ``410`` ERROR event relists; a stream cut mid-reply is an error and the watch resumes from the last
  resourceVersion; a stream that goes silent is a stall, and the relist clears it;
- a watch the API server refuses is the ``ApiError`` of its Status;
- ``Reflector.stop`` ends a loop watch at once; a closed loop falls back to the reflector's own thread;
- a configuration with a proxy follows in the calling thread (the official client), TLS on the loop;
- the extender's lifespan hands its running loop to the cache's reflectors.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from kubernetes import client as k8s_client

from ballast.extender.main import create_app
from ballast.kube.client import ApiError, Kube, Reflector, load_api_client
from ballast.kube.lean import LeanTransport
from ballast.kube.watch_stream import EVENTS_PER_TURN, LoopReader, StreamRefused, StreamSilent, open_stream
from ballast.model.policy import load_policy
from ballast.testing.fakekube import make_node
from ballast.testing.parts import POLICY_FILE, missing_part, wait_for

NODES = "/api/v1/nodes"
NODE_WATCH = r"^/api/v1/nodes$"


def node(name: str) -> dict[str, Any]:
    """A node with nothing but its name: a small watch event (about 200 bytes)."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def rv_of(obj: dict[str, Any]) -> str:
    return obj["metadata"]["resourceVersion"]


class LoopThread:
    """An asyncio event loop running in its own thread, as the extender's serves its verbs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-event-loop", daemon=True)
        self.thread.start()
        assert self.thread.ident is not None
        self.ident: int = self.thread.ident

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        assert not self.thread.is_alive(), "the event loop did not stop"
        self.loop.close()


class Recorder:
    """A Reflector handler that keeps what it was handed, and on which thread."""

    def __init__(self, on_replace: Callable[[int], None] | None = None) -> None:
        self.cond = threading.Condition()
        self.replaces: list[tuple[list[str], str]] = []
        self.applied: list[tuple[str, str]] = []
        self.threads: list[int] = []
        """``threading.get_ident()`` of every ``apply``."""
        self.on_replace = on_replace
        """Called with the replace's number (1 for the first list), before it is recorded."""

    def replace(self, objects: Iterable[dict[str, Any]], resource_version: str) -> None:
        names = [o["metadata"]["name"] for o in objects]
        if self.on_replace is not None:
            self.on_replace(len(self.replaces) + 1)
        with self.cond:
            self.replaces.append((names, resource_version))
            self.cond.notify_all()

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        with self.cond:
            self.applied.append((event_type, obj["metadata"]["name"]))
            self.threads.append(threading.get_ident())
            self.cond.notify_all()

    def wait(self, predicate: Callable[[Recorder], bool], what: str, timeout: float = 10.0) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: predicate(self), timeout):
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {what}: "
                    f"replaces={self.replaces} applied={self.applied}"
                )


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    try:
        yield lt
    finally:
        lt.close()


@pytest.fixture
def kube(fake_kube) -> Iterator[Kube]:
    k = Kube(fake_kube.api_client(), timeout=2.0)
    try:
        yield k
    finally:
        k.close()


@pytest.fixture
def reflect(kube: Kube, loop_thread: LoopThread) -> Iterator[Callable[..., Reflector]]:
    """Start a node Reflector on the loop (quick backoffs); every one is stopped after the test, before
    the loop and the fake API server go."""
    made: list[Reflector] = []

    def make(handler: Recorder, **kw: Any) -> Reflector:
        kw.setdefault("backoff_initial", 0.05)
        kw.setdefault("recover_max", 0.2)
        r = Reflector(kube, NODES, handler, name="nodes", **kw)
        r.loop = loop_thread.loop
        made.append(r)
        r.start()
        return r

    yield make
    for r in made:
        r.stop()


def watching(fake_kube, r: Reflector) -> LoopReader:
    """Wait until ``r`` follows its watch on the loop; the reader of that watch."""
    assert fake_kube.wait_for_watches(1, "nodes", timeout=10)
    return wait_for(lambda: r._response if isinstance(r._response, LoopReader) else None, 10, "a loop reader")


def watch_requests(fake_kube) -> list[Any]:
    return fake_kube.find_requests("GET", NODE_WATCH, watch=True)


# -- the reflector on the loop ---------------------------------------------------------------------------


def test_a_reflector_on_the_loop_follows_every_change_and_applies_it_on_the_loops_thread(
    fake_kube, reflect, loop_thread: LoopThread
) -> None:
    fake_kube.add(node("a"))
    handler = Recorder()
    r = reflect(handler)
    assert r.wait_synced(10)
    assert handler.replaces[0][0] == ["a"]
    reader = watching(fake_kube, r)
    assert reader.loop is loop_thread.loop
    fake_kube.add(node("b"))
    fake_kube.patch("nodes", "a", {"metadata": {"labels": {"zone": "z1"}}})
    last = fake_kube.delete("nodes", "b")
    handler.wait(lambda h: len(h.applied) >= 3, "three events")
    assert handler.applied == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert r._thread is not None
    assert set(handler.threads) == {loop_thread.ident} != {r._thread.ident}
    assert r.stats.events == 3 and r.stats.errors == 0
    assert reader.events == 3
    wait_for(lambda: r.resource_version == rv_of(last), 5, "the reflector's resourceVersion to move")


def test_a_burst_read_in_one_go_is_applied_in_order_a_bounded_number_per_loop_turn(
    fake_kube, kube: Kube, loop_thread: LoopThread
) -> None:
    """200 events (about 43 kB: one read) wait in the socket while the loop is held; once it runs, they are
    applied in order, ``EVENTS_PER_TURN`` per turn: a callback that reschedules itself every turn counts
    the turns, and sees itself run between the slices."""
    count = 3 * EVENTS_PER_TURN + 8
    loop = loop_thread.loop
    start_rv = fake_kube.resource_version
    names = [f"burst-{i:03d}" for i in range(count)]
    for name in names:
        fake_kube.add(node(name))
    readers: list[LoopReader] = []
    opened = threading.Event()
    turns = [0]
    ticking = [True]
    held: list[str] = []

    def on_open(reader: LoopReader) -> None:
        readers.append(reader)
        opened.set()

    def tick() -> None:
        turns[0] += 1
        if ticking[0]:
            loop.call_soon(tick)

    def buffered(reader: LoopReader) -> int:
        try:
            waiting = reader.sock.recv(1 << 20, socket.MSG_PEEK)
        except BlockingIOError:
            waiting = b""
        return (bytes(reader.reply.data) + waiting).count(b'"type":')

    def hold() -> None:
        """Hold the loop (as a long verb would) until every event of the burst waits in the socket."""
        if not opened.wait(10):
            held.append("the watch never opened")
            return
        deadline = time.monotonic() + 10
        while buffered(readers[0]) < count:
            if time.monotonic() > deadline:
                held.append(f"only {buffered(readers[0])} events arrived")
                return
            time.sleep(0.005)
        loop.call_soon(tick)

    seen: list[tuple[str, int, int]] = []
    stop = threading.Event()

    def on_event(event: dict[str, Any]) -> None:
        seen.append((event["object"]["metadata"]["name"], turns[0], threading.get_ident()))
        if len(seen) == count:
            ticking[0] = False
            stop.set()

    loop.call_soon_threadsafe(hold)
    query = {"resourceVersion": start_rv}
    kube.follow(NODES, query, 20, stop, on_event, on_open=on_open, silence=20, loop=loop)
    assert held == []
    assert [name for name, _, _ in seen] == names
    assert {ident for _, _, ident in seen} == {loop_thread.ident}
    per_turn = Counter(turn for _, turn, _ in seen)
    assert max(per_turn.values()) == EVENTS_PER_TURN, per_turn
    assert len(per_turn) >= math.ceil(count / EVENTS_PER_TURN), per_turn
    turn_order = [turn for _, turn, _ in seen]
    assert turn_order == sorted(turn_order)


def test_a_410_error_event_in_the_stream_relists_and_the_watch_goes_on(
    fake_kube, reflect, loop_thread: LoopThread
) -> None:
    fake_kube.add(node("a"))
    handler = Recorder()
    r = reflect(handler)
    assert r.wait_synced(10)
    watching(fake_kube, r)
    listed_at = r.resource_version
    # history moves on where this watch does not look (a pod), then is compacted past the node watch's
    # resourceVersion; the watch ends normally and its next one, from that resourceVersion, gets a 410
    fake_kube.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}})  # fmt: skip
    floor = fake_kube.compact()
    assert int(listed_at) < int(floor)
    fake_kube.drop_watches("nodes", graceful=True)
    handler.wait(lambda h: len(h.replaces) >= 2, "the relist")
    assert r.stats.expired == 1 and r.stats.errors == 0
    assert handler.replaces[1] == (["a"], floor)
    # the 410 came in the stream (an ERROR event of a 200 reply), from the resourceVersion listed before
    expired_at = [q for q in watch_requests(fake_kube) if q.query.get("resourceVersion") == listed_at]
    assert len(expired_at) == 2 and {q.status for q in watch_requests(fake_kube)} == {200}
    # and it follows again, on the loop
    watching(fake_kube, r)
    fake_kube.add(node("c"))
    handler.wait(lambda h: ("ADDED", "c") in h.applied, "node c")
    assert handler.applied == [("ADDED", "c")]
    assert handler.threads == [loop_thread.ident]


def test_a_stream_cut_mid_reply_is_an_error_and_the_watch_resumes_from_the_last_resource_version(
    fake_kube, reflect, loop_thread
) -> None:
    handler = Recorder()
    r = reflect(handler)
    assert r.wait_synced(10)
    watching(fake_kube, r)
    a = fake_kube.add(node("a"))
    handler.wait(lambda h: len(h.applied) >= 1, "node a")
    assert fake_kube.drop_watches("nodes") == 1  # no terminating chunk: the connection just closes
    fake_kube.add(node("b"))
    handler.wait(lambda h: len(h.applied) >= 2, "node b")
    assert handler.applied == [("ADDED", "a"), ("ADDED", "b")]  # nothing replayed, nothing missed
    assert set(handler.threads) == {loop_thread.ident}
    assert r.stats.errors == 1 and r.stats.lists == 1
    assert "reply ended" in r.stats.last_error or "reset" in r.stats.last_error.lower(), r.stats.last_error
    again = watch_requests(fake_kube)[1]
    assert again.query["resourceVersion"] == rv_of(a)
    wait_for(lambda: not r.failing, 5, "the failure cleared by the new watch")


def test_a_stream_silent_past_the_stall_bound_is_a_stall_and_the_relist_clears_it(
    fake_kube, reflect, loop_thread
) -> None:
    """The fake sends the reply's head and then nothing (its bookmarks come once a minute): with a bound
    of 0.3 s the loop's watch is stalled; the relist runs while ``stalled`` and ``failing`` say so, and
    the watch after it (given a long bound by the test, so it stays healthy) clears them."""
    state_at_relist: list[tuple[str, str, float | None]] = []
    r: Reflector | None = None

    def on_replace(n: int) -> None:
        if n == 2:
            assert r is not None
            state_at_relist.append((r.stalled, r.failing, r.stats.failing_since))
            r.stall_seconds = 60.0

    handler = Recorder(on_replace)
    start = time.monotonic()
    r = reflect(handler, stall_seconds=0.3)
    assert r.wait_synced(10)
    handler.wait(lambda h: len(h.replaces) >= 2, "the relist after the stall")
    assert time.monotonic() - start >= 0.3
    assert r.stats.stalls == 1 and r.stats.errors == 0
    ((stalled, failing, since),) = state_at_relist
    assert "stalled" in stalled and "0.3s" in stalled
    assert failing == stalled and since is not None
    wait_for(lambda: r.stats.watches >= 2 and isinstance(r._response, LoopReader), 10, "the next watch")
    assert r.stalled == "" and r.failing == "" and r.stats.failing_since is None
    assert r.problem() is None
    fake_kube.add(node("a"))
    handler.wait(lambda h: h.applied == [("ADDED", "a")], "node a after the stall")
    assert handler.threads == [loop_thread.ident]


# -- Kube.follow ----------------------------------------------------------------------------------------


def test_a_watch_the_api_server_refuses_is_the_api_error_of_its_status(fake_kube, kube, loop_thread) -> None:
    message = 'nodes is forbidden: User "system:anonymous" cannot watch resource "nodes"'
    fake_kube.fail_next("GET", NODE_WATCH, 403, message=message, watch=True)
    events: list[dict[str, Any]] = []
    with pytest.raises(ApiError) as caught:
        kube.follow(NODES, {}, 30, threading.Event(), events.append, silence=5, loop=loop_thread.loop)
    assert (caught.value.code, caught.value.reason, caught.value.message) == (403, "Forbidden", message)
    assert caught.value.body.get("kind") == "Status"
    assert isinstance(caught.value.__cause__, StreamRefused)  # refused on the loop's path
    assert events == []


def test_no_connection_is_api_error_unavailable(loop_thread) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connections are refused
    cfg = k8s_client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    kube = Kube(k8s_client.ApiClient(cfg), timeout=2.0)
    try:
        with pytest.raises(ApiError) as caught:
            kube.follow(NODES, {}, 30, threading.Event(), lambda e: None, silence=5, loop=loop_thread.loop)
    finally:
        kube.close()
    assert (caught.value.code, caught.value.reason) == (0, "Unavailable")
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)  # from the loop path's own connect


def test_with_a_proxy_the_watch_is_followed_in_the_calling_thread(fake_kube, loop_thread) -> None:
    """The lean transport does not speak to proxies: with one configured, ``follow`` reads the watch with
    the official client in the calling thread (the fake stands in for the proxy: it takes the
    absolute-form target); without, the same call is applied on the loop."""
    for name in ("a", "b"):
        fake_kube.add(node(name))

    def follow(proxy: str | None) -> tuple[list[str], set[int], Kube]:
        cfg = k8s_client.Configuration()
        cfg.host = fake_kube.url
        cfg.proxy = proxy
        kube = Kube(k8s_client.ApiClient(cfg), timeout=2.0)
        names: list[str] = []
        threads: set[int] = set()
        stop = threading.Event()

        def on_event(event: dict[str, Any]) -> None:
            names.append(event["object"]["metadata"]["name"])
            threads.add(threading.get_ident())
            if len(names) == 2:
                stop.set()

        try:
            kube.follow(NODES, {}, 30, stop, on_event, silence=10, loop=loop_thread.loop)
        finally:
            kube.close()
        return names, threads, kube

    names, threads, direct = follow(None)
    assert names == ["a", "b"] and threads == {loop_thread.ident}
    assert direct._stream_transport() is not None
    names, threads, proxied = follow(fake_kube.url)
    assert names == ["a", "b"] and threads == {threading.get_ident()}
    assert proxied._stream_transport() is None
    assert len(watch_requests(fake_kube)) == 2


# -- stopping, and a loop that is gone --------------------------------------------------------------------


def test_stop_ends_a_loop_watch_at_once_and_closes_its_socket(fake_kube, reflect) -> None:
    handler = Recorder()
    r = reflect(handler)  # the default stall bound: the reader's own polling step is a second
    assert r.wait_synced(10)
    reader = watching(fake_kube, r)
    start = time.monotonic()
    r.stop()
    assert time.monotonic() - start < 2.0
    assert r._thread is not None and not r._thread.is_alive()
    assert reader.done.is_set() and reader.error is None
    assert reader.sock.fileno() == -1
    assert fake_kube.wait_for_watches(0, "nodes", timeout=5, exactly=True)  # the server saw it go


def test_shutdown_from_another_thread_ends_a_loop_watch_without_its_stop(
    fake_kube, kube: Kube, loop_thread: LoopThread
) -> None:
    """What ``Reflector.stop`` relies on: ``LoopReader.shutdown`` returns once the loop has let go of the
    stream (its socket closed), and ``follow`` returns normally; ``stop`` is never set and the silence
    bound is a minute, so nothing else could have ended it."""
    fake_kube.add(node("a"))
    readers: list[LoopReader] = []
    applied = threading.Event()
    outcome: list[BaseException | None] = []

    def on_open(reader: LoopReader) -> None:
        readers.append(reader)

    def run() -> None:
        try:
            never = threading.Event()
            kube.follow(NODES, {}, 60, never, lambda e: applied.set(), on_open=on_open, silence=60,
                        loop=loop_thread.loop)  # fmt: skip
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    follower = threading.Thread(target=run, name="follower", daemon=True)
    follower.start()
    assert applied.wait(10)  # attached to the loop: the synthetic ADDED of node a was applied there
    (reader,) = readers
    start = time.monotonic()
    reader.shutdown()
    assert reader.done.is_set() and reader.sock.fileno() == -1
    follower.join(2)
    assert time.monotonic() - start < 2.0 and not follower.is_alive()
    assert outcome == [None]
    assert fake_kube.wait_for_watches(0, "nodes", timeout=5, exactly=True)


def test_a_reflector_whose_loop_closes_goes_on_in_its_own_thread(fake_kube, reflect, loop_thread) -> None:
    handler = Recorder()
    r = reflect(handler, stall_seconds=2.0)
    assert r.wait_synced(10)
    reader = watching(fake_kube, r)
    fake_kube.add(node("a"))
    handler.wait(lambda h: len(h.applied) == 1, "node a")
    loop_thread.close()  # the loop goes while the watch is attached to it
    wait_for(lambda: reader.done.is_set(), 5, "the loop's watch to end")
    assert reader.sock.fileno() == -1
    assert fake_kube.wait_for_watches(1, "nodes", timeout=5)  # the next watch: no loop, no reader
    fake_kube.add(node("b"))
    handler.wait(lambda h: len(h.applied) == 2, "node b")
    assert r._thread is not None
    assert handler.applied == [("ADDED", "a"), ("ADDED", "b")]
    assert handler.threads == [loop_thread.ident, r._thread.ident]
    assert r.stats.lists == 1 and r.stats.errors == 0 and r.stats.stalls == 0
    start = time.monotonic()
    r.stop()
    assert time.monotonic() - start < 2.0 and not r._thread.is_alive()


def test_a_reflector_given_a_closed_loop_follows_in_its_own_thread(fake_kube, reflect, loop_thread) -> None:
    loop_thread.close()
    handler = Recorder()
    r = reflect(handler)
    assert r.wait_synced(10)
    assert fake_kube.wait_for_watches(1, "nodes", timeout=10)
    fake_kube.add(node("a"))
    handler.wait(lambda h: len(h.applied) == 1, "node a")
    assert r._thread is not None and handler.threads == [r._thread.ident]
    assert r._response is not None and not isinstance(r._response, LoopReader)
    start = time.monotonic()
    r.stop()
    assert time.monotonic() - start < 2.0 and not r._thread.is_alive()


def test_the_extender_follows_its_watches_on_its_own_event_loop(fake_kube, kubeconfig: Path) -> None:
    """The extender's lifespan hands its running loop to the cache: every reflector follows on it, a node's
    change is applied on the loop's thread, and the watches end with the app."""
    kube = Kube(load_api_client(str(kubeconfig)), timeout=2.0)
    app = create_app(load_policy(POLICY_FILE), kube=kube, policy_poll_seconds=0, access_log=False)
    cache = app.state.services.cache
    nodes = next(r for r in cache.reflectors if r.path == NODES)
    threads: list[int] = []
    apply = nodes.handler.apply

    def recorded(event_type: str, obj: dict[str, Any]) -> None:
        threads.append(threading.get_ident())
        apply(event_type, obj)

    nodes.handler.apply = recorded
    with TestClient(app) as client:
        assert cache.wait_synced(10)
        loop = client.portal.call(asyncio.get_running_loop)
        loop_ident = client.portal.call(threading.get_ident)
        assert all(r.loop is loop for r in cache.reflectors)
        wait_for(lambda: isinstance(nodes._response, LoopReader), 10, "the node watch on the loop")
        fake_kube.add(make_node("n1"))
        wait_for(lambda: cache.node("n1") is not None, 10, "node n1 in the cache")
        assert threads == [loop_ident]
    assert not any(r._thread is not None and r._thread.is_alive() for r in cache.reflectors)
    kube.close()


# -- TLS -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway CA and a serving certificate for 127.0.0.1 (the cluster tests' own, made with openssl)."""
    from ballast.testing.binaries import MissingPiece
    from ballast.testing.controlplane import make_certs

    where = tmp_path_factory.mktemp("pki")
    try:
        make_certs(where)
    except MissingPiece as exc:
        missing_part(str(exc))
    return where


def chunk(event: dict[str, Any]) -> bytes:
    line = orjson.dumps(event) + b"\n"
    return b"%x\r\n%s\r\n" % (len(line), line)


def test_a_tls_watch_is_read_on_the_loop_including_the_events_that_came_with_the_head(
    pki: Path, loop_thread: LoopThread
) -> None:
    """The first event travels in the TLS record of the reply's head (so it is already read when the loop
    takes the socket over); the server sends the rest only once that event was applied."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(pki / "server.crt"), str(pki / "server.key"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    first_applied = threading.Event()
    requests: list[bytes] = []
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    events = [{"type": "ADDED", "object": node(n)} for n in ("a", "b", "c")]

    def serve() -> None:
        conn, _ = listener.accept()
        conn.settimeout(10)
        with conn, contextlib.suppress(OSError), server_ctx.wrap_socket(conn, server_side=True) as tls:
            got = b""
            while b"\r\n\r\n" not in got:
                data = tls.recv(4096)
                if not data:
                    return
                got += data
            requests.append(got)
            tls.sendall(head + chunk(events[0]))
            if not first_applied.wait(10):
                return  # cut without the rest: the client sees a broken stream
            tls.sendall(chunk(events[1]) + chunk(events[2]) + b"0\r\n\r\n")
            tls.recv(1)  # until the client closes

    server = threading.Thread(target=serve, name="tls-watch-server", daemon=True)
    server.start()
    cfg = k8s_client.Configuration()
    cfg.host = f"https://127.0.0.1:{port}"
    cfg.ssl_ca_cert = str(pki / "ca.crt")
    kube = Kube(k8s_client.ApiClient(cfg), timeout=5.0)
    seen: list[tuple[str, int]] = []

    def on_event(event: dict[str, Any]) -> None:
        seen.append((event["object"]["metadata"]["name"], threading.get_ident()))
        first_applied.set()

    try:
        transport = kube._stream_transport()
        assert transport is not None and transport.tls
        start = time.monotonic()
        kube.follow(NODES, {"resourceVersion": "7"}, 30, threading.Event(), on_event, silence=10,
                    loop=loop_thread.loop)  # fmt: skip
        assert time.monotonic() - start < 5.0
    finally:
        kube.close()
        server.join(10)
        listener.close()
    assert seen == [(n, loop_thread.ident) for n in ("a", "b", "c")]
    (request,) = requests
    line = request.split(b"\r\n", 1)[0]
    assert line.startswith(b"GET /api/v1/nodes?") and line.endswith(b" HTTP/1.1")
    assert b"watch=true" in line and b"resourceVersion=7" in line and b"timeoutSeconds=30" in line


def serve_once(reply: bytes, then: Callable[[], None] = lambda: None) -> int:
    """A one-connection server that reads the request, sends ``reply``, runs ``then`` and closes: its
    port."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(reply)
                then()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def test_a_stream_that_ended_with_events_still_queued_keeps_to_the_bound_per_turn(
    loop_thread: LoopThread,
) -> None:
    """2000 events and the connection's end all arrive before the loop reads any: the closed socket is
    readable at every turn, and reading it must not apply more than ``EVENTS_PER_TURN`` at once."""
    count = 2000
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = b"".join(chunk({"type": "ADDED", "object": node(f"n{i}")}) for i in range(count))
    sent = threading.Event()
    port = serve_once(head + body, sent.set)  # closed without the last chunk: a stream cut short
    loop = loop_thread.loop
    turn = [0]

    def tick() -> None:
        turn[0] += 1
        loop.call_soon(tick)

    loop.call_soon_threadsafe(tick)
    sock, reply = open_stream(LeanTransport(f"http://127.0.0.1:{port}", None), NODES, {}, 5, 5)
    assert sent.wait(10)
    time.sleep(0.05)  # the close travels after the last byte
    seen: list[int] = []
    reader = LoopReader(loop, sock, reply, lambda event: seen.append(turn[0]), threading.Event())
    with pytest.raises(ConnectionResetError):
        reader.wait(5)
    assert len(seen) == count
    assert max(Counter(seen).values()) == EVENTS_PER_TURN


def test_a_stall_is_reported_even_when_the_loop_is_too_busy_to_end_the_stream_itself(
    loop_thread: LoopThread,
) -> None:
    """The head comes, then nothing, while a verb holds the loop past the silence bound: the wait still
    ends in ``StreamSilent`` (the reflector counts a stall and relists), not as a watch that ended."""
    release = threading.Event()
    port = serve_once(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", lambda: release.wait(10))
    loop_thread.loop.call_soon_threadsafe(time.sleep, 1.0)
    sock, reply = open_stream(LeanTransport(f"http://127.0.0.1:{port}", None), NODES, {}, 5, 5)
    reader = LoopReader(loop_thread.loop, sock, reply, lambda event: None, threading.Event())
    try:
        with pytest.raises(StreamSilent):
            reader.wait(0.3)
    finally:
        release.set()
    assert wait_for(lambda: reader.done.is_set(), 5, "the reader to let go of the socket")
    assert sock.fileno() == -1
