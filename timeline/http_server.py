"""An aiohttp application served from a background thread with its own event loop.

The marker server and the daemon's API both run this way, inside processes that do other work.
Startup and shutdown hooks of the application (``app.on_startup``, ``app.on_shutdown``) run on
that loop; ``port=0`` picks a free port, readable from :attr:`port` after :meth:`start`.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable

from aiohttp import web


class BackgroundHttpServer:
    def __init__(
        self, make_app: Callable[[], web.Application], host: str, port: int, name: str
    ) -> None:
        self._make_app = make_app
        self.host = host
        self.port = port
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> BackgroundHttpServer:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError(f"{self.name} did not start")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self.loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as e:
            self._error = e
            self._started.set()
            return
        self._started.set()
        loop.run_forever()
        if self._runner is not None:
            loop.run_until_complete(self._runner.cleanup())
        loop.close()

    async def _serve(self) -> None:
        # queued requests are answered by the app's shutdown hooks; idle keep-alive clients
        # need not be awaited
        self._runner = web.AppRunner(self._make_app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    def stop(self) -> None:
        if self.loop is None or self._thread is None:
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
