"""The public web, on loopback: pages a test writes, served by a local server that the safe
egress reaches through its `dial` (PUBLIC → this server), with names a test maps through its
resolver (`Names`). The guard checks the public address; no byte leaves the machine."""

from __future__ import annotations

from aiohttp import web

from tests.fakes import on_loopback

PUBLIC = "93.184.215.14"  # a public address: the guard lets it through; `dial` serves it here


class Names:
    """A resolver for test names (`news.example` → [PUBLIC]) that counts its lookups; a name
    given two answers gives the second from its second lookup on (DNS rebinding)."""

    def __init__(self, **answers: list[list[str]]):
        self.answers = {name.replace("_", "."): list(given) for name, given in answers.items()}
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        if host not in self.answers:
            raise OSError(f"no test name {host}")
        given = self.answers[host]
        return given.pop(0) if len(given) > 1 else given[0]


class FakeWeb:
    def __init__(self) -> None:
        self.got: list[str] = []  # the path of every request, in order
        self.routes: dict[str, web.Response | str | int] = {}
        self.runner: web.AppRunner | None = None
        self.port = 0

    def page(self, path: str, html: str, content_type: str = "text/html") -> None:
        self.routes[path] = web.Response(text=html, content_type=content_type)

    def redirect(self, path: str, to: str) -> None:
        self.routes[path] = to

    def megabytes(self, path: str, count: int) -> None:
        self.routes[path] = count

    def dial(self, address: str, port: int) -> tuple[str, int]:
        return ("127.0.0.1", self.port) if address == PUBLIC else (address, port)

    async def serve(self, request: web.Request) -> web.StreamResponse:
        self.got.append(request.path)
        found = self.routes.get(request.path)
        if found is None:
            raise web.HTTPNotFound()
        if isinstance(found, str):
            raise web.HTTPFound(found)
        if isinstance(found, int):
            response = web.StreamResponse(headers={"Content-Type": "text/plain"})
            await response.prepare(request)
            for _ in range(found):
                await response.write(b"x" * 1_000_000)
            return response
        return web.Response(body=found.body, content_type=found.content_type)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.serve)
        self.runner, self.port = await on_loopback(app)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
