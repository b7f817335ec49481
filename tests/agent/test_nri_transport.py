"""The NRI transport against a peer written here from the protocol's description (containerd/nri
``pkg/net/multiplex``, containerd/ttrpc ``channel.go``): it packs and unpacks the bytes with ``struct`` on
its own, so a mistake in ``ballast.agent.nri.framing`` cannot cancel itself out. Only the protobuf
messages are shared (they are the contract)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from ballast.agent.nri.framing import (
    MAX_TRUNK_PAYLOAD,
    FrameDecoder,
    FramingError,
    MessageDecoder,
    encode_frames,
    encode_message,
)
from ballast.agent.nri.messages import pb
from ballast.agent.nri.ttrpc import UNIMPLEMENTED, ConnectionClosed, TtrpcConnection, TtrpcError

PLUGIN, RUNTIME = 1, 2  # the logical connections: the plugin serves on 1 and calls on 2


def ttrpc_bytes(stream: int, kind: int, payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">IIBB", len(payload), stream, kind, flags) + payload


def trunk_bytes(conn: int, data: bytes) -> bytes:
    return struct.pack(">II", conn, len(data)) + data


class Peer:
    """The runtime's end of the socket: writes raw frames, reads whole ttrpc messages per connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(5)
        self.buf = b""
        self.streams: dict[int, bytes] = {}

    def send(self, data: bytes, *, piece: int = 0) -> None:
        """Send ``data``; in pieces of ``piece`` bytes with pauses so they arrive in separate reads."""
        if not piece:
            self.sock.sendall(data)
            return
        for i in range(0, len(data), piece):
            self.sock.sendall(data[i : i + piece])
            time.sleep(0.002)

    def request(self, conn: int, stream: int, service: str, method: str, payload: bytes) -> bytes:
        req = pb.Request(service=service, method=method, payload=payload).SerializeToString()
        return trunk_bytes(conn, ttrpc_bytes(stream, 1, req))

    def receive(self) -> tuple[int, int, int, bytes]:
        """The next whole ttrpc message: (conn, stream, type, payload)."""
        while True:
            for conn, data in list(self.streams.items()):
                if len(data) >= 10:
                    length, stream, kind, _flags = struct.unpack(">IIBB", data[:10])
                    if len(data) >= 10 + length:
                        self.streams[conn] = data[10 + length :]
                        return conn, stream, kind, data[10 : 10 + length]
            while len(self.buf) >= 8:
                conn, length = struct.unpack(">II", self.buf[:8])
                if len(self.buf) < 8 + length:
                    break
                self.streams[conn] = self.streams.get(conn, b"") + self.buf[8 : 8 + length]
                self.buf = self.buf[8 + length :]
            if any(len(d) >= 10 for d in self.streams.values()):
                continue
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the plugin hung up")
            self.buf += chunk

    def response(self) -> tuple[int, int, pb.Response]:
        conn, stream, kind, payload = self.receive()
        assert kind == 2, f"expected a response, got type {kind}"
        return conn, stream, pb.Response.FromString(payload)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield a, b
    for s in (a, b):
        s.close()


def echo_handler(service: str, method: str, payload: bytes) -> bytes:
    if method == "Echo":
        return payload[::-1]
    if method == "Boom":
        raise ValueError("exploded")
    raise TtrpcError(UNIMPLEMENTED, f"method {method}")


# --- pure framing -------------------------------------------------------------------------------------


def test_frames_fed_a_byte_at_a_time_come_out_whole_and_in_order() -> None:
    data = trunk_bytes(1, b"hello") + trunk_bytes(2, b"") + trunk_bytes(2, b"world!")
    decoder = FrameDecoder()
    out = [f for byte in data for f in decoder.feed(bytes([byte]))]
    assert out == [(1, b"hello"), (2, b""), (2, b"world!")]
    assert decoder.pending == 0


def test_a_payload_over_the_limit_is_split_and_a_header_over_it_refused() -> None:
    data = bytes(range(256)) * ((MAX_TRUNK_PAYLOAD + 300) // 256)
    frames = FrameDecoder().feed(encode_frames(2, data))
    assert [c for c, _ in frames] == [2, 2] and len(frames[0][1]) == MAX_TRUNK_PAYLOAD
    assert b"".join(p for _, p in frames) == data
    with pytest.raises(FramingError, match="over the limit"):
        FrameDecoder().feed(struct.pack(">II", 1, MAX_TRUNK_PAYLOAD + 1))
    with pytest.raises(FramingError, match="reserved"):
        FrameDecoder().feed(trunk_bytes(0, b"x"))


def test_ttrpc_messages_split_across_frames_decode_and_encode_matches_the_layout() -> None:
    raw = ttrpc_bytes(7, 1, b"abc", flags=4) + ttrpc_bytes(9, 2, b"")
    assert encode_message(7, 1, b"abc", 4) + encode_message(9, 2, b"") == raw
    decoder = MessageDecoder()
    first = decoder.feed(raw[:5]) + decoder.feed(raw[5:14])
    rest = decoder.feed(raw[14:])
    assert [(m.stream_id, m.type, m.flags, m.payload) for m in first + rest] == [
        (7, 1, 4, b"abc"),
        (9, 2, 0, b""),
    ]


# --- the connection -----------------------------------------------------------------------------------


def test_a_request_split_across_reads_is_answered_on_its_stream(pair) -> None:
    mine, theirs = pair
    conn = TtrpcConnection(mine, echo_handler)
    peer = Peer(theirs)
    try:
        peer.send(peer.request(PLUGIN, 3, "svc", "Echo", b"abcdef"), piece=3)
        c, stream, response = peer.response()
        assert (c, stream, response.status.code, response.payload) == (PLUGIN, 3, 0, b"fedcba")
    finally:
        conn.close()


def test_unknown_method_and_a_failing_handler_get_error_statuses_and_the_connection_lives(pair) -> None:
    mine, theirs = pair
    conn = TtrpcConnection(mine, echo_handler, workers=1)
    peer = Peer(theirs)
    try:
        peer.send(peer.request(PLUGIN, 1, "svc", "Nope", b""))
        _, stream, response = peer.response()
        assert (stream, response.status.code) == (1, UNIMPLEMENTED)
        assert "Nope" in response.status.message
        peer.send(peer.request(PLUGIN, 3, "svc", "Boom", b""))
        _, stream, response = peer.response()
        assert (stream, response.status.code) == (3, 13) and "exploded" in response.status.message
        peer.send(trunk_bytes(PLUGIN, ttrpc_bytes(5, 3, b"")))  # a stream's data: NRI has none
        _, stream, response = peer.response()
        assert (stream, response.status.code) == (5, UNIMPLEMENTED)
        peer.send(peer.request(PLUGIN, 7, "svc", "Echo", b"ok"))
        assert peer.response()[2].payload == b"ko"
        assert not conn.closed
    finally:
        conn.close()


def test_two_calls_and_a_served_request_interleaved_byte_by_byte(pair) -> None:
    """Two calls of ours waiting on connection 2 while the peer's request arrives on connection 1; the
    peer answers the second call first, and its frames for both connections are cut and interleaved."""
    mine, theirs = pair
    conn = TtrpcConnection(mine, echo_handler)
    peer = Peer(theirs)
    results: dict[str, object] = {}

    def call(name: str, payload: bytes) -> None:
        try:
            results[name] = conn.call("rt", "M", payload, timeout=5)
        except Exception as e:  # recorded for the assertion below
            results[name] = e

    threads = [threading.Thread(target=call, args=(n, n.encode())) for n in ("first", "second")]
    try:
        for t in threads:
            t.start()
            time.sleep(0.05)
        seen = {}
        for _ in range(2):
            c, stream, kind, payload = peer.receive()
            assert (c, kind) == (RUNTIME, 1)
            seen[pb.Request.FromString(payload).payload] = stream
        assert seen[b"first"] % 2 == 1 and seen[b"second"] > seen[b"first"]  # odd, increasing

        def answer(stream: int, payload: bytes) -> bytes:
            return ttrpc_bytes(stream, 2, pb.Response(payload=payload).SerializeToString())

        second = answer(seen[b"second"], b"2nd")
        first = answer(seen[b"first"], b"1st")
        served = ttrpc_bytes(9, 1, pb.Request(service="s", method="Echo", payload=b"xyz").SerializeToString())
        # connection 2's stream (second, then first) and connection 1's, in 4-byte frames, alternating
        stream2, stream1 = second + first, served
        chunks = []
        for i in range(0, max(len(stream2), len(stream1)), 4):
            if stream2[i : i + 4]:
                chunks.append(trunk_bytes(RUNTIME, stream2[i : i + 4]))
            if stream1[i : i + 4]:
                chunks.append(trunk_bytes(PLUGIN, stream1[i : i + 4]))
        peer.send(b"".join(chunks), piece=5)
        for t in threads:
            t.join(5)
        assert results == {"first": b"1st", "second": b"2nd"}
        c, stream, response = peer.response()
        assert (c, stream, response.payload) == (PLUGIN, 9, b"zyx")
    finally:
        conn.close()


def test_an_error_status_raises_and_an_unanswered_call_times_out(pair) -> None:
    mine, theirs = pair
    conn = TtrpcConnection(mine, echo_handler)
    peer = Peer(theirs)
    try:
        box: dict[str, BaseException] = {}

        def call() -> None:
            try:
                conn.call("rt", "Fail", b"", timeout=5)
            except TtrpcError as e:
                box["e"] = e

        t = threading.Thread(target=call)
        t.start()
        _, stream, _, _ = peer.receive()
        status = pb.Status(code=5, message="no such container")
        peer.send(
            trunk_bytes(RUNTIME, ttrpc_bytes(stream, 2, pb.Response(status=status).SerializeToString()))
        )
        t.join(5)
        assert box["e"].code == 5 and "no such container" in str(box["e"])
        started = time.monotonic()
        with pytest.raises(TtrpcError, match="no answer"):
            conn.call("rt", "Silent", b"", timeout=0.2)
        assert time.monotonic() - started < 2
    finally:
        conn.close()


def test_a_peer_that_hangs_up_mid_message_fails_the_waiting_call_and_reports_why(pair) -> None:
    mine, theirs = pair
    closed: list[str] = []
    conn = TtrpcConnection(mine, echo_handler, on_closed=closed.append)
    peer = Peer(theirs)
    box: dict[str, BaseException] = {}

    def call() -> None:
        try:
            conn.call("rt", "M", b"", timeout=5)
        except BaseException as e:
            box["e"] = e

    t = threading.Thread(target=call)
    t.start()
    peer.receive()
    peer.send(struct.pack(">II", RUNTIME, 100) + b"partial")
    theirs.close()
    t.join(5)
    assert isinstance(box["e"], ConnectionClosed)
    assert conn.wait_closed(2) and closed == ["peer hung up in the middle of a message"]
    with pytest.raises(ConnectionClosed):
        conn.call("rt", "M", b"", timeout=1)


def test_garbage_closes_the_connection_with_a_protocol_error(pair) -> None:
    mine, theirs = pair
    closed: list[str] = []
    conn = TtrpcConnection(mine, echo_handler, on_closed=closed.append)
    theirs.sendall(b"\xff" * 16)
    assert conn.wait_closed(2)
    assert closed and closed[0].startswith("protocol error")
