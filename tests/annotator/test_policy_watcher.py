"""The annotator's policy watcher also carries SIGTERM to the loop: it must survive any reload failure."""

from __future__ import annotations

import asyncio
import threading

from ballast.annotator.run import _watch_policy
from ballast.model.policy import parse_policy
from ballast.program.skeleton import PolicyReload
from tests.model.test_policy import BASE


class ExplodingStore:
    """A store whose reload fails in a way nobody foresaw."""

    def __init__(self) -> None:
        self.current = parse_policy(BASE)
        self.calls = 0

    def reload(self, reason: str = "requested") -> bool:
        self.calls += 1
        raise RecursionError("maximum recursion depth exceeded")

    def reload_if_changed(self) -> bool:
        return self.reload("file changed")


def test_watcher_survives_a_failing_reload_and_still_carries_stop() -> None:
    async def scenario() -> tuple[int, bool]:
        store = ExplodingStore()
        stop, loop_stop, hangup = threading.Event(), threading.Event(), threading.Event()
        hangup.set()
        reload = PolicyReload(store, 0.25, hangup)
        task = asyncio.create_task(_watch_policy(reload, store.current, stop, loop_stop))
        for _ in range(400):  # until it has failed a few times (poll every 0.25 s)
            if store.calls >= 3 or task.done():
                break
            await asyncio.sleep(0.05)
        assert not task.done(), "the watcher died on a failing reload"
        assert not loop_stop.is_set()
        stop.set()
        await asyncio.wait_for(task, 30)
        return store.calls, loop_stop.is_set()

    calls, stopped = asyncio.run(scenario())
    assert calls >= 3
    assert stopped
