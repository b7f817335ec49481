"""The lean transport's HTTP handling (``ballast.kube.lean``) against a scripted server on a real socket:
what a reply can look like (chunked, cut short, not HTTP, never sent), when a connection is reused and when
it is not, and that nothing malformed is sent. Its authentication against the real kube-apiserver is in
``tests/cluster/test_kube_lean.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from ballast.kube.async_client import AsyncKube
from ballast.kube.client import ApiError, Kube
from ballast.kube.lean import LeanTransport, TransportError

Reply = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[bool]]
"""Answers one request (its head and body as read); returns whether to keep the connection open."""

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"a": "b"}\n'


def fixed(raw: bytes, keep: bool = True) -> Reply:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bool:
        writer.write(raw)
        await writer.drain()
        return keep

    return reply


class Server:
    """A plain-HTTP server on loopback that answers each request with the next of ``replies`` (the last
    one again once they run out) and keeps every request it read."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[bytes] = []
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                request = head + (await reader.readexactly(length) if length else b"")
                self.requests.append(request)
                reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
                if not await reply(reader, writer, request):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_a_chunked_reply_and_its_headers_are_read_whole() -> None:
    chunked = (
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'5\r\n{"a":\r\n6\r\n "b"}\n\r\n0\r\n\r\n'
    )

    async def main() -> None:
        async with Server(fixed(chunked)) as server:
            transport = LeanTransport(server.url, None)
            status, reason, body, headers = await transport.request("GET", "/x", None, None, 5.0)
            assert (status, reason, body) == (429, "Too Many Requests", b'{"a": "b"}\n')
            assert headers.get("Retry-After") == headers.get("retry-after") == "3"

    run(main())


def test_keep_alive_reuses_one_connection_and_a_close_is_honoured() -> None:
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"

    async def main() -> None:
        async with Server(fixed(OK), fixed(OK), fixed(closing, keep=False), fixed(OK)) as server:
            transport = LeanTransport(server.url, None)
            for _ in range(4):
                status, _, _, _ = await transport.request("GET", "/x", None, None, 5.0)
                assert status == 200
            # two calls on the first connection, the third told it to close, the fourth opened another
            assert transport.opened == server.connections == 2

    run(main())


def test_an_idle_connection_the_server_closed_is_replaced_before_use() -> None:
    async def main() -> None:
        async with Server(fixed(OK, keep=False), fixed(OK)) as server:
            transport = LeanTransport(server.url, None)
            assert (await transport.request("GET", "/x", None, None, 5.0))[0] == 200
            await asyncio.sleep(0.1)  # the server closed after its reply, without saying so
            assert (await transport.request("GET", "/x", None, None, 5.0))[0] == 200
            assert transport.opened == 2
            assert len(server.requests) == 2  # nothing was sent on the dead connection

    run(main())


@pytest.mark.parametrize(
    "raw",
    [
        b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"cut":',  # cut short
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",  # not HTTP
    ],
    ids=["cut-short", "not-http"],
)
def test_a_broken_reply_is_no_answer_and_its_connection_is_dropped(raw: bytes) -> None:
    async def main() -> None:
        async with Server(fixed(raw, keep=False), fixed(OK)) as server:
            kube = AsyncKube(Kube(None), LeanTransport(server.url, None))  # type: ignore[arg-type]
            with pytest.raises(ApiError) as failed:
                await kube.get("/x")
            assert failed.value.code == 0 and failed.value.reason == "Unavailable"
            assert await kube.get("/x") == {"a": "b"}
            assert kube.transport is not None and kube.transport.opened == 2

    run(main())


def test_no_answer_within_the_budget_is_a_timeout_and_the_connection_is_dropped() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bool:
        await asyncio.sleep(30)
        return False

    async def main() -> None:
        async with Server(silent, fixed(OK)) as server:
            kube = AsyncKube(Kube(None, timeout=0.3), LeanTransport(server.url, None))  # type: ignore[arg-type]
            loop = asyncio.get_running_loop()
            start = loop.time()
            with pytest.raises(ApiError) as late:
                await kube.get("/x")
            assert late.value.code == 0 and late.value.reason == "Timeout"
            assert loop.time() - start < 2
            assert await kube.get("/x") == {"a": "b"}  # on a new connection: the late reply is nobody's
            assert kube.transport is not None and kube.transport.opened == 2

    run(main())


def test_a_cancelled_call_leaves_no_connection_behind() -> None:
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bool:
        await asyncio.sleep(0.5)
        writer.write(OK)
        return True

    async def main() -> None:
        async with Server(slow, fixed(OK)) as server:
            transport = LeanTransport(server.url, None)
            call = asyncio.create_task(transport.request("GET", "/x", None, None, 5.0))
            await asyncio.sleep(0.1)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            assert transport._pool == []
            assert (await transport.request("GET", "/x", None, None, 5.0))[0] == 200
            assert transport.opened == 2

    run(main())


@pytest.mark.parametrize("path", ["/a b", "/a\r\nX-Injected: 1", "/caf\u00e9"])
def test_a_path_that_would_break_the_request_line_is_not_sent(path: str) -> None:
    async def main() -> None:
        async with Server(fixed(OK)) as server:
            transport = LeanTransport(server.url, None)
            with pytest.raises(TransportError, match="not a path that can be sent"):
                await transport.request("GET", path, None, None, 5.0)
            assert server.connections == 0 and transport.opened == 0

    run(main())


def test_the_token_is_asked_at_every_call_and_the_body_is_framed() -> None:
    tokens = iter(["Bearer one", "Bearer two"])

    async def main() -> None:
        async with Server(fixed(OK)) as server:
            transport = LeanTransport(server.url, None, lambda: next(tokens), user_agent="ballast-test/1")
            await transport.request("POST", "/x", b'{"k": 1}', None, 5.0, {"dryRun": "All"})
            await transport.request("PATCH", "/x", b"{}", "application/merge-patch+json", 5.0)
            first, second = server.requests
            assert first.startswith(b"POST /x?dryRun=All HTTP/1.1\r\n")
            assert b"\r\nAuthorization: Bearer one\r\n" in first
            assert b"\r\nAuthorization: Bearer two\r\n" in second
            assert b"\r\nUser-Agent: ballast-test/1\r\n" in first
            assert b"\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\n" in first
            assert first.endswith(b'\r\n\r\n{"k": 1}')
            assert b"\r\nContent-Type: application/merge-patch+json\r\n" in second

    run(main())


def test_a_connection_of_another_event_loop_is_not_reused() -> None:
    """The verb's loop is the one that opened the connection; a client used from a new loop (a restarted
    server, a test's) opens its own instead of touching a transport bound to a closed loop."""

    async def call(transport: LeanTransport, url: str) -> int:
        return (await transport.request("GET", "/x", None, None, 5.0))[0]

    async def main() -> None:
        async with Server(fixed(OK)) as server:
            transport = LeanTransport(server.url, None)
            assert await call(transport, server.url) == 200
            other = await asyncio.to_thread(asyncio.run, call(transport, server.url))
            assert other == 200 and transport.opened == 2

    run(main())


def test_a_configuration_with_a_proxy_binds_through_the_official_client() -> None:
    """The lean transport does not speak to proxies: with ``proxy-url`` in the configuration the bind's calls
    go through the official client (which does), in a worker thread, with the same answers."""
    from kubernetes import client as k8s_client

    async def main() -> None:
        async with Server(fixed(OK)) as server:
            cfg = k8s_client.Configuration()
            cfg.host = server.url
            direct = AsyncKube.lean(Kube(k8s_client.ApiClient(cfg)))
            assert isinstance(direct.transport, LeanTransport)
            assert await direct.get("/x") == {"a": "b"}
            cfg.proxy = server.url  # the scripted server stands in for the proxy: it answers every request
            proxied = AsyncKube.lean(Kube(k8s_client.ApiClient(cfg)))
            assert proxied.transport is None
            assert await proxied.get("/x") == {"a": "b"}
            assert server.requests[-1].startswith(f"GET {server.url}/x HTTP/1.1".encode())  # proxy form

    run(main())
