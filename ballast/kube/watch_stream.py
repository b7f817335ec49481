"""A watch stream read on an asyncio event loop: the extender follows its watches where it serves.

A watch followed in its own thread (urllib3 reading, the handler applying) hands the GIL back and forth
with the event loop for every event while pods flow (thousands of futex wake-ups per 500 pods under the
real kube-scheduler), and its handler runs in the middle of whatever a verb is deciding. The CPU is about
the same either way (``docs/performance.md``, the pod watch); what changes is the scheduling. Here the
reflector's thread only opens the stream (connect, TLS, the request, the reply's
head: blocking work done once per watch) and hands the socket to the event loop, which reads it when it
is readable (``add_reader``, non-blocking ``recv_into``: no asyncio transport and no ``sslproto`` layer
in between), parses it with ``httptools`` (llhttp, which also undoes the chunked framing) and applies
each event between the verbs it serves. The thread then only waits: for the end of the stream, for
``stop``, or for a silence longer than the stall bound.

Events are applied at most ``EVENTS_PER_TURN`` per loop turn, so a burst of thousands of events (a
namespace deleted) never holds a verb back for more than a few milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from ballast.kube.lean import READ_SIZE, LeanTransport, Reply

EVENTS_PER_TURN = 64
CLOSE_WAIT_SECONDS = 5.0
"""How long ``close`` waits for the event loop to let go of the socket."""


class StreamRefused(Exception):
    """The API server answered the watch with a status that is not 2xx."""

    def __init__(self, status: int, reason: str, body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.body = body
        super().__init__(f"{status} {reason}")


class StreamSilent(Exception):
    """Nothing arrived, not even the reply's head, for longer than the silence bound."""

    def __init__(self, silence: float) -> None:
        self.silence = silence
        super().__init__(f"nothing received for {silence:g}s")


class _StreamReply(Reply):
    """The reply's body kept as one growing buffer that the reader consumes line by line."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()

    def on_body(self, body: bytes) -> None:
        self.data += body


def open_stream(
    transport: LeanTransport,
    path: str,
    query: Mapping[str, str],
    connect_timeout: float,
    silence: float,
) -> tuple[socket.socket, _StreamReply]:
    """Connect, send the watch's GET and read the reply's head, blocking (in the reflector's thread):
    the socket, and the reply (the body bytes that came with the head are in ``data``). A reply that is
    not 2xx is read to its end and raised as ``StreamRefused``; a head that does not come within
    ``silence`` seconds as ``StreamSilent``; no connection as ``OSError``."""
    head = transport.head("GET", path, None, None, query)
    sock = socket.create_connection((transport.host, transport.port), timeout=connect_timeout)
    try:
        if transport.tls:
            assert transport.context is not None
            sock = transport.context.wrap_socket(sock, server_hostname=transport.server_name)
        sock.sendall(head)
        sock.settimeout(silence)
        reply = _StreamReply()
        buf = bytearray(READ_SIZE)
        view = memoryview(buf)
        while reply.status == 0 or (reply.status // 100 != 2 and not reply.complete):
            try:
                n = sock.recv_into(buf)
            except TimeoutError as exc:
                raise StreamSilent(silence) from exc
            if not n:
                if reply.status:
                    break  # a refusal whose body ends with the connection
                raise ConnectionResetError("the API server closed the watch before its reply's head")
            reply.parser.feed_data(view[:n])
        if reply.status // 100 != 2:
            raise StreamRefused(reply.status, reply.reason, bytes(reply.data))
        sock.setblocking(False)
        return sock, reply
    except BaseException:
        sock.close()
        raise


class LoopReader:
    """One open watch stream, read and applied on ``loop``; ``wait`` (in the thread that opened it)
    returns when it ends and raises what ended it.

    ``on_event`` gets every event (``{"type", "object"}``) on the loop, in order; an exception it raises
    ends the stream and is raised by ``wait`` (an ERROR event's ``410``, say). The stream ends normally
    when the server ends the reply (the watch's timeout) or ``stop`` is set; a connection closed before
    the reply ended is an error (``ConnectionResetError``), as it is for urllib3."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        reply: _StreamReply,
        on_event: Callable[[dict[str, Any]], None],
        stop: threading.Event,
        events_per_turn: int = EVENTS_PER_TURN,
    ) -> None:
        self.loop = loop
        self.sock = sock
        self.reply = reply
        self.on_event = on_event
        self.stop = stop
        self.events_per_turn = events_per_turn
        self.fd = sock.fileno()
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.last_byte = time.monotonic()
        """``time.monotonic()`` of the last read that brought bytes (the stall bound's clock)."""
        self.events = 0
        self.error: BaseException | None = None
        self.closing = False
        """Set (from either thread) once the stream is to end: no event is applied after it."""
        self.done = threading.Event()
        self._closed_with: BaseException | None = None
        """What ``close`` was asked to end the stream with (a stall), whichever side ends it."""
        self._eof = False
        self._start = 0
        """Where the first unapplied line starts in ``reply.data``."""
        self._again = False
        """Whether a turn to apply more buffered events is scheduled."""
        self._buf = bytearray(READ_SIZE)
        self._view = memoryview(self._buf)

    # -- the event loop's side -------------------------------------------------------------------

    def _attach(self) -> None:
        if self.closing:
            self._finish(None)
            return
        self.loop.add_reader(self.fd, self._readable)
        # The head's reads may have left bytes in the parser or, with TLS, decrypted in the SSL object
        # where the socket's readiness would never show them.
        self._readable()

    def _readable(self) -> None:
        if self.done.is_set():
            return
        sock = self.sock
        try:
            while True:
                try:
                    n = sock.recv_into(self._buf)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
                    break
                if not n:
                    self._eof = True
                    self.loop.remove_reader(self.fd)  # a closed socket would be readable at every turn
                    break
                self.last_byte = time.monotonic()
                self.reply.parser.feed_data(self._view[:n])
                if n < READ_SIZE and not (self.tls and sock.pending()):
                    # Drained: what the kernel still holds makes the socket readable again (OpenSSL reads
                    # one record at a time), so no second read just to be told there is nothing.
                    break
        except Exception as exc:
            self._finish(exc)
            return
        if not self._again:  # else a turn already scheduled applies what came, in order
            self._apply()

    def _apply(self) -> None:
        self._again = False
        data = self.reply.data
        start = self._start
        applied = 0
        try:
            while not self.closing:
                nl = data.find(b"\n", start)
                if nl < 0:
                    break
                line, start = data[start:nl], nl + 1
                if not line.strip():
                    continue
                self.on_event(orjson.loads(line))
                self.events += 1
                applied += 1
                if self.stop.is_set():
                    self._finish(None)
                    return
                if applied >= self.events_per_turn:
                    self._again = True
                    self.loop.call_soon(self._apply)
                    break
            else:
                return
            if start:
                del data[:start]
                start = 0
            if self._again:
                return
            if self.reply.complete:
                if data.strip():
                    self.on_event(orjson.loads(data))
                self._finish(None)
            elif self._eof:
                framed = "transfer-encoding" in self.reply.headers or "content-length" in self.reply.headers
                self._finish(
                    ConnectionResetError("the API server closed the watch before its reply ended")
                    if framed
                    else None
                )
        except Exception as exc:
            self._finish(exc)
        finally:
            self._start = start

    def _finish(self, error: BaseException | None) -> None:
        if self.done.is_set():
            return
        self.closing = True
        self.error = error if error is not None else self._closed_with
        with contextlib.suppress(Exception):
            self.loop.remove_reader(self.fd)
        with contextlib.suppress(OSError):
            self.sock.close()
        self.reply.parser = None
        self.done.set()

    # -- the opening thread's side ---------------------------------------------------------------

    def wait(self, silence: float) -> None:
        """Hand the stream to the loop and wait for its end. ``StreamSilent`` when no byte came for
        ``silence`` seconds; returns when ``stop`` is set or the loop is gone (closed)."""
        try:
            self.loop.call_soon_threadsafe(self._attach)
        except RuntimeError:  # the loop is closed
            self.sock.close()
            return
        step = max(0.05, min(1.0, silence / 4))
        while not self.done.wait(step):
            if self.stop.is_set():
                self.close(None)
                return
            silent = time.monotonic() - self.last_byte
            if silent > silence:
                self.close(StreamSilent(silence))
                break
            if self.loop.is_closed():
                self.close(None)
                return
        error = self.error if self.done.is_set() else self._closed_with  # a loop too busy to finish
        if error is not None:
            raise error

    def close(self, error: BaseException | None = None) -> None:
        """End the stream from any thread (``Reflector.stop`` calls ``shutdown``): no event is applied
        after this returns, unless the loop is stuck for ``CLOSE_WAIT_SECONDS``."""
        if self.done.is_set():
            return
        if self._closed_with is None:
            self._closed_with = error
        self.closing = True
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._finish(error)
            return
        try:
            self.loop.call_soon_threadsafe(self._finish, error)
        except RuntimeError:  # the loop is closed: nothing reads the socket any more
            self._finish(error)
            return
        self.done.wait(CLOSE_WAIT_SECONDS)

    shutdown = close
