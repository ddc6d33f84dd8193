"""A fault-injecting HTTP proxy in front of moto's S3 server.

Every request goes through the real client stack (s3fs, aiobotocore, botocore's retries) and is
forwarded to moto, except that, at a configurable rate, the proxy

* answers ``503 SlowDown`` without forwarding (throttling),
* resets the connection before forwarding (the request never arrived),
* forwards, then resets the connection (the request took effect, its answer was lost),
* forwards, then stalls past the client's read timeout (a timeout after the fact),

and it can deny requests matching a rule with ``403 AccessDenied`` every time (a permanent error).
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from timeline.http_server import BackgroundHttpServer

FAULTS = ("slowdown", "reset_before", "reset_after", "stall_after")
_HOP = {"content-length", "transfer-encoding", "connection", "keep-alive", "host"}
SLOWDOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message></Error>"
)


@dataclass
class FaultyS3:
    upstream: str
    rate: float = 0.0
    seed: int = 0
    stall_seconds: float = 3.0
    deny: Callable[[str, str], bool] | None = None  # (method, path) -> deny with 403
    rule: Callable[[str, str], str | None] | None = None  # (method, path) -> a fault, or None
    injected: Counter[str] = field(default_factory=Counter)
    requests: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self._session: aiohttp.ClientSession | None = None
        self._server = BackgroundHttpServer(self._app, "127.0.0.1", 0, "faulty-s3")

    @property
    def url(self) -> str:
        return self._server.url

    def start(self) -> FaultyS3:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def _choose(self, method: str, path: str) -> str | None:
        with self._lock:
            self.requests += 1
            chosen = self.rule(method, path) if self.rule is not None else None
            if chosen is not None:
                self.injected[chosen] += 1
                return chosen
            if self.deny is not None and self.deny(method, path):
                self.injected["denied"] += 1
                return "denied"
            if self.rate and self._rng.random() < self.rate:
                fault = self._rng.choice(FAULTS)
                self.injected[fault] += 1
                return fault
        return None

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)

        async def close(_: web.Application) -> None:
            if self._session is not None:
                await self._session.close()

        app.on_cleanup.append(close)
        return app

    async def _forward(
        self, request: web.Request, body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        if self._session is None:
            self._session = aiohttp.ClientSession(auto_decompress=False)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with self._session.request(
            request.method,
            f"{self.upstream}{request.path_qs}",
            headers=headers,
            data=body,
            allow_redirects=False,
        ) as response:
            data = await response.read()
            out = {k: v for k, v in response.headers.items() if k.lower() not in _HOP}
            if request.method == "HEAD" and "Content-Length" in response.headers:
                out["Content-Length"] = response.headers["Content-Length"]  # no body to count
            return response.status, out, data

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        fault = self._choose(request.method, request.path)
        if fault == "denied":
            return web.Response(status=403, body=DENIED, content_type="application/xml")
        if fault == "slowdown":
            return web.Response(status=503, body=SLOWDOWN, content_type="application/xml")
        if fault == "reset_before":
            return _reset(request)
        status, headers, data = await self._forward(request, body)
        if fault == "reset_after":
            return _reset(request)
        if fault == "stall_after":
            await asyncio.sleep(self.stall_seconds)
            return _reset(request)
        if request.method == "HEAD":
            return web.Response(status=status, headers=headers)
        return web.Response(status=status, headers=headers, body=data)


def _reset(request: web.Request) -> web.StreamResponse:
    transport = request.transport
    if transport is not None:
        transport.abort()
    raise asyncio.CancelledError  # the handler ends without an answer
