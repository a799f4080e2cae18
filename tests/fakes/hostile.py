"""A hostile server on 127.0.0.1, as a page, a search engine or an image server on the open
internet could be (SPEC 18 "One boundary to the outside"): a test gives each path what it
answers — a body with the headers it chooses, a compression bomb, a slow drip, or nothing at all.
Every request is recorded."""

from __future__ import annotations

import asyncio
import functools
import zlib
from typing import Awaitable, Callable

from aiohttp import web

from tests.fakes import on_loopback

GIB = 1 << 30


@functools.lru_cache(maxsize=None)
def gzip_bomb(layers: int = 2, size: int = GIB) -> bytes:
    """`size` zero bytes gzipped `layers` times: two layers of 1 GiB are 1,827 bytes."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zero = bytes(1 << 20)
    body = b"".join(packer.compress(zero) for _ in range(size >> 20)) + packer.flush()
    for _ in range(layers - 1):
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        body = packer.compress(body) + packer.flush()
    return body


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HostileServer:
    def __init__(self) -> None:
        self.got: list[str] = []  # the path of every request
        self.routes: dict[str, Handler] = {}
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.stopping = asyncio.Event()  # a hanging answer ends when the server stops, not an hour later

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(self, path: str, body: bytes, **headers: str) -> None:
        """`body` as it is, with these headers (names with `_` for `-`: content_type=…)."""
        given = {name.replace("_", "-").title(): value for name, value in headers.items()}

        async def handler(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse(headers=given)
            response.content_length = len(body)
            await response.prepare(request)
            await response.write(body)
            return response
        self.routes[path] = handler

    def bomb(self, path: str, content_type: str = "text/html", layers: int = 2) -> None:
        """1 GiB of zeros, gzipped `layers` times (Content-Encoding: gzip, gzip)."""
        self.answer(path, gzip_bomb(layers), content_type=content_type,
                    content_encoding=", ".join(["gzip"] * layers))

    def drip(self, path: str, every_s: float, content_type: str = "text/html") -> None:
        """A byte at a time, one every `every_s`, for ever: no read ever waits long."""
        async def handler(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse(headers={"Content-Type": content_type})
            await response.prepare(request)
            while True:
                await response.write(b"x")
                await asyncio.sleep(every_s)
        self.routes[path] = handler

    def hang(self, path: str) -> None:
        """Headers never come."""
        async def handler(request: web.Request) -> web.StreamResponse:
            await asyncio.wait_for(self.stopping.wait(), 3600)
            raise web.HTTPGatewayTimeout()
        self.routes[path] = handler

    async def serve(self, request: web.Request) -> web.StreamResponse:
        self.got.append(request.path)
        handler = self.routes.get(request.path)
        if handler is None:
            raise web.HTTPNotFound()
        return await handler(request)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.serve)
        self.runner, self.port = await on_loopback(app)

    async def stop(self) -> None:
        self.stopping.set()  # else aiohttp waits 60 s for a handler whose client has gone
        if self.runner is not None:
            await self.runner.cleanup()
