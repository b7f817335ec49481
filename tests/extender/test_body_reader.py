"""``read_body`` on ASGI messages: whole and split bodies, the shared deadline timer (a late read times out,
the others on the loop do not), a caller's cancellation stays a cancellation, and the bytes in flight
always come back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest
from starlette.requests import ClientDisconnect

from ballast.extender.api.body import BodyBudget, BodyTimeout, BodyTooLarge, read_body


def _scope(length: int | None = None) -> dict:
    headers = [(b"host", b"x")] + ([(b"content-length", str(length).encode())] if length is not None else [])
    return {"type": "http", "headers": headers}


def _receive(messages: Iterable[dict], then_wait: bool = False):
    queue = list(messages)

    async def receive() -> dict:
        if queue:
            await asyncio.sleep(0)
            return queue.pop(0)
        if then_wait:
            await asyncio.Event().wait()  # a client that sends nothing more
        return {"type": "http.disconnect"}

    return receive


def _chunk(body: bytes, more: bool = False) -> dict:
    return {"type": "http.request", "body": body, "more_body": more}


def test_a_whole_body_in_one_message_and_one_split_over_three() -> None:
    async def main() -> tuple[bytes, bytes]:
        one = await read_body(_scope(7), _receive([_chunk(b'{"a":1}')]), 100, 5.0)
        three = await read_body(
            _scope(), _receive([_chunk(b'{"a"', True), _chunk(b"", True), _chunk(b":1}")]), 100, 5.0
        )
        return one, three

    assert asyncio.run(main()) == (b'{"a":1}', b'{"a":1}')


def test_declared_and_streamed_oversize_bodies_are_refused() -> None:
    with pytest.raises(BodyTooLarge):
        asyncio.run(read_body(_scope(101), _receive([_chunk(b"x")]), 100, 5.0))
    with pytest.raises(BodyTooLarge):
        asyncio.run(read_body(_scope(), _receive([_chunk(b"x" * 60, True), _chunk(b"x" * 60)]), 100, 5.0))


def test_a_late_read_times_out_while_a_punctual_one_on_the_same_loop_is_answered() -> None:
    budget = BodyBudget(1000)

    async def main() -> tuple[object, object]:
        slow = asyncio.ensure_future(
            read_body(_scope(100), _receive([_chunk(b"{", True)], then_wait=True), 1000, 0.2, budget)
        )

        async def punctual() -> bytes:
            await asyncio.sleep(0.1)
            return await read_body(_scope(2), _receive([_chunk(b"{}")]), 1000, 5.0, budget)

        return tuple(await asyncio.gather(slow, punctual(), return_exceptions=True))  # type: ignore[return-value]

    slow, punctual = asyncio.run(main())
    assert isinstance(slow, BodyTimeout) and slow.seconds == 0.2
    assert punctual == b"{}"
    assert budget.held == 2  # the timed-out read gave its byte back; the answered one keeps its two


def test_each_late_read_times_out_at_its_own_deadline() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()

        async def late(seconds: float) -> float:
            start = loop.time()
            with pytest.raises(BodyTimeout):
                await read_body(_scope(), _receive([], then_wait=True), 100, seconds)
            return loop.time() - start

        return list(await asyncio.gather(late(0.6), late(0.1), late(0.3)))

    took = asyncio.run(main())
    for seconds, elapsed in zip((0.6, 0.1, 0.3), took, strict=True):
        assert seconds <= elapsed < seconds + 0.25, took


def test_a_callers_cancellation_is_not_a_timeout_and_leaves_no_timer_behind() -> None:
    budget = BodyBudget(1000)

    async def main() -> None:
        task = asyncio.ensure_future(
            read_body(_scope(), _receive([_chunk(b"abc", True)], then_wait=True), 100, 0.3, budget)
        )
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.4)  # past the cancelled read's deadline: nothing fires at anyone
        assert await read_body(_scope(), _receive([_chunk(b"ok")]), 100, 0.3) == b"ok"

    asyncio.run(main())
    assert budget.held == 0


def test_a_client_that_goes_away_is_a_disconnect() -> None:
    with pytest.raises(ClientDisconnect):
        asyncio.run(read_body(_scope(10), _receive([_chunk(b"{", True)]), 100, 5.0))
