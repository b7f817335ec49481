"""The extender's app served in a thread by uvicorn with the configuration ``ballast extender`` ships
(``server_config``: its protocol class and limits), on a free loopback port."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from ballast.extender.cli import server_config
from ballast.testing.parts import wait_for


@contextlib.contextmanager
def shipped_server(app: Any, **limits: Any) -> Iterator[int]:
    """Serve ``app`` until the block ends; yields the port. ``limits`` go to ``server_config``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(server_config(app, "127.0.0.1", port, **limits))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=30, what="uvicorn started")
        yield port
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
