"""ttrpc over NRI's multiplexed socket: one connection that serves one logical connection and calls on
another (``ballast.agent.nri.framing`` has the byte layouts).

``TtrpcConnection(sock, handler)`` starts a reader thread. Requests arriving on ``serve_conn`` (the Plugin
service's connection for a plugin) are handed to ``handler(service, method, payload) -> bytes`` on a small
pool of worker threads, never on the reader: a handler may wait on something that waits for an answer
this reader must deliver. What the handler returns is the answer's payload; a ``TtrpcError`` it raises
becomes the answer's status (``UNIMPLEMENTED`` for a method it does not know), any other exception an
``INTERNAL`` status: the peer always gets an answer. ``call(service, method, payload)`` sends a request on
``call_conn`` and waits for its answer; an error status raises ``TtrpcError``, a connection that closes
meanwhile ``ConnectionClosed``.

Only unary calls: NRI has no streams. A streaming message (type data) is answered with an error status.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ballast.agent.nri.framing import (
    PLUGIN_CONN,
    RUNTIME_CONN,
    TYPE_REQUEST,
    TYPE_RESPONSE,
    FrameDecoder,
    FramingError,
    Message,
    MessageDecoder,
    encode_frames,
    encode_message,
)
from ballast.agent.nri.messages import pb

__all__ = [
    "INTERNAL",
    "INVALID_ARGUMENT",
    "UNIMPLEMENTED",
    "ConnectionClosed",
    "Handler",
    "TtrpcConnection",
    "TtrpcError",
]

log = logging.getLogger("ballast.agent.nri")

# gRPC status codes, which ttrpc uses as they are.
OK = 0
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14

Handler = Callable[[str, str, bytes], bytes]


class TtrpcError(Exception):
    """A call answered with an error status, or a handler's refusal (sent as that status)."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"ttrpc status {code}: {message}")


class ConnectionClosed(Exception):
    """The socket closed (or broke) before the answer came."""


class _Pending:
    __slots__ = ("done", "error", "response")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.response: Any = None
        self.error: Exception | None = None


class TtrpcConnection:
    """One NRI socket connection (see the module docstring). ``on_closed(reason)`` is told once, from
    the reader thread, when the peer hangs up or the bytes stop making sense."""

    def __init__(
        self,
        sock: socket.socket,
        handler: Handler,
        *,
        serve_conn: int = PLUGIN_CONN,
        call_conn: int = RUNTIME_CONN,
        workers: int = 4,
        on_closed: Callable[[str], None] | None = None,
        name: str = "nri",
    ) -> None:
        self._sock = sock
        self._handler = handler
        self.serve_conn = serve_conn
        self.call_conn = call_conn
        self.on_closed = on_closed
        self._write_lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._pending_lock = threading.Lock()
        self._stream_ids = itertools.count(1, 2)  # a caller's streams: odd, increasing
        self._closed = threading.Event()
        self._finished = threading.Event()  # set once closing is done, ``on_closed`` told
        self.close_reason = ""
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{name}-handler")
        self._reader = threading.Thread(target=self._read_loop, name=f"{name}-reader", daemon=True)
        self._reader.start()

    # --- calling ------------------------------------------------------------------------------------

    def call(self, service: str, method: str, payload: bytes, timeout: float = 5.0) -> bytes:
        """Call ``service``/``method`` with ``payload`` (a serialized message); the answer's payload."""
        if self._closed.is_set():
            raise ConnectionClosed(f"connection closed: {self.close_reason}")
        pending = _Pending()
        with self._pending_lock:
            stream_id = next(self._stream_ids)
            self._pending[stream_id] = pending
        request = pb.Request(service=service, method=method, payload=payload, timeout_nano=int(timeout * 1e9))
        try:
            self._send(self.call_conn, encode_message(stream_id, TYPE_REQUEST, request.SerializeToString()))
            if not pending.done.wait(timeout):
                raise TtrpcError(DEADLINE_EXCEEDED, f"{service}/{method}: no answer within {timeout:.1f}s")
        finally:
            with self._pending_lock:
                self._pending.pop(stream_id, None)
        if pending.error is not None:
            raise pending.error
        status = pending.response.status
        if status.code != OK:
            raise TtrpcError(status.code, f"{service}/{method}: {status.message}")
        return bytes(pending.response.payload)

    # --- writing ------------------------------------------------------------------------------------

    def _send(self, conn_id: int, data: bytes) -> None:
        try:
            with self._write_lock:
                self._sock.sendall(encode_frames(conn_id, data))
        except OSError as e:
            self._close(f"write failed: {e}")
            raise ConnectionClosed(f"connection closed: {self.close_reason}") from None

    def _answer(self, stream_id: int, payload: bytes = b"", code: int = OK, message: str = "") -> None:
        response = pb.Response(status=pb.Status(code=code, message=message), payload=payload)
        try:
            self._send(
                self.serve_conn, encode_message(stream_id, TYPE_RESPONSE, response.SerializeToString())
            )
        except ConnectionClosed:
            log.debug("answer to stream %d not sent: %s", stream_id, self.close_reason)

    # --- reading ------------------------------------------------------------------------------------

    def _read_loop(self) -> None:
        frames = FrameDecoder()
        streams: dict[int, MessageDecoder] = {}
        reason = "peer hung up"
        try:
            while not self._closed.is_set():
                data = self._sock.recv(1 << 16)
                if not data:
                    if frames.pending or any(d.pending for d in streams.values()):
                        reason = "peer hung up in the middle of a message"
                    break
                for conn_id, chunk in frames.feed(data):
                    decoder = streams.setdefault(conn_id, MessageDecoder())
                    for message in decoder.feed(chunk):
                        self._dispatch(conn_id, message)
        except FramingError as e:
            reason = f"protocol error: {e}"
        except OSError as e:
            reason = "closed" if self._closed.is_set() else f"read failed: {e}"
        self._close(reason)

    def _dispatch(self, conn_id: int, message: Message) -> None:
        if conn_id == self.serve_conn and message.type == TYPE_REQUEST:
            self._pool.submit(self._serve, message)
        elif conn_id == self.call_conn and message.type == TYPE_RESPONSE:
            with self._pending_lock:
                pending = self._pending.get(message.stream_id)
            if pending is None:
                log.debug("answer on stream %d that nobody waits for (timed out?)", message.stream_id)
                return
            try:
                pending.response = pb.Response.FromString(message.payload)
            except Exception as e:  # protobuf's DecodeError: garbage in one answer fails that call only
                pending.error = TtrpcError(INTERNAL, f"unreadable answer: {e}")
            pending.done.set()
        elif conn_id == self.serve_conn:
            self._answer(message.stream_id, code=UNIMPLEMENTED, message=f"message type {message.type}")
        else:
            log.debug("ignored message type %d on connection %d", message.type, conn_id)

    def _serve(self, message: Message) -> None:
        try:
            request = pb.Request.FromString(message.payload)
        except Exception as e:
            self._answer(message.stream_id, code=INVALID_ARGUMENT, message=f"unreadable request: {e}")
            return
        try:
            payload = self._handler(request.service, request.method, bytes(request.payload))
        except TtrpcError as e:
            self._answer(message.stream_id, code=e.code, message=e.message)
            return
        except Exception as e:
            log.exception("NRI %s/%s failed", request.service, request.method)
            self._answer(message.stream_id, code=INTERNAL, message=f"{type(e).__name__}: {e}")
            return
        self._answer(message.stream_id, payload)

    # --- closing ------------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def wait_closed(self, timeout: float | None = None) -> bool:
        """Wait until the connection is closed and ``on_closed`` was told."""
        return self._finished.wait(timeout)

    def _close(self, reason: str) -> None:
        with self._pending_lock:
            if self._closed.is_set():
                return
            self.close_reason = reason
            self._closed.set()
            pending = list(self._pending.values())
        for p in pending:
            p.error = ConnectionClosed(f"connection closed: {reason}")
            p.done.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._pool.shutdown(wait=False)
        if self.on_closed is not None:
            try:
                self.on_closed(reason)
            except Exception:
                log.exception("on_closed callback failed")
        self._finished.set()

    def close(self) -> None:
        self._close("closed")
        if threading.current_thread() is not self._reader:
            self._reader.join(2)
