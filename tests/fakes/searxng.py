"""A SearXNG instance on 127.0.0.1: its JSON API (`/search?q=…&format=json`), answering the
results a test gives for a query (a default otherwise) and recording every query."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from bot.tools.web import CHECK_QUERY


class FakeSearXNG:
    def __init__(self) -> None:
        self.json = True  # False: as an instance whose settings.yml leaves json out of search.formats
        self.queries: list[str] = []  # what people searched for (each process's one start-up check aside)
        self.checks = 0
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.runner: web.AppRunner | None = None
        self.url = ""

    def answer(self, query: str, *results: tuple[str, str, str]) -> None:
        """(title, url, snippet) for each result of this query."""
        self.results[query] = [{"title": title, "url": url, "content": snippet, "engine": "fake"}
                               for title, url, snippet in results]

    async def search(self, request: web.Request) -> web.Response:
        if request.query.get("format") != "json" or not self.json:
            return web.Response(status=403, text="format not allowed")  # as SearXNG says without json enabled
        query = request.query.get("q", "")
        if query == CHECK_QUERY:
            self.checks += 1
        else:
            self.queries.append(query)
        return web.json_response({"query": query, "results": self.results.get(query, []), "answers": []})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/search", self.search)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
