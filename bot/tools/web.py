"""`search` and `read` (SPEC 18): looking something up through the owner's SearXNG, and reading a
web page. What they bring back is outside text (fenced as data by the toolbox). `read` opens
only an address the person wrote in this turn's message or a search returned in this turn —
outside text cannot send the character elsewhere — and only through the safe egress
(bot/tools/egress.py). A page's text is taken out of its HTML by trafilatura (a maintained
extractor), off the event loop."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urlsplit

import httpx
import trafilatura

from bot.tools.egress import Egress, EgressRefused, certificates
from bot.tools.toolbox import Outcome, TurnScope, result

log = logging.getLogger(__name__)
SEARCH_RESULTS = 5
SEARCH_TIMEOUT_S = 10.0
PAGE_CHARS = 20_000  # of a page's text, before the toolbox cuts it to its token budget

SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web. Returns up to 5 results: title, url and snippet.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}
READ = {
    "type": "function",
    "function": {
        "name": "read",
        "description": "Read the text of a web page: only an address the person wrote in their message, "
                       "or one a search returned in this reply.",
        "parameters": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
    },
}


def _same(url: str) -> str:
    return url.rstrip("/")


class Search:
    name, spec, guidance = "search", SEARCH, ""  # what it brings back is labelled as data where it stands

    def __init__(self, base_url: str):
        self.base_url = base_url.rstrip("/")
        self.tls = certificates()  # made once: a TLS context costs milliseconds to build

    def offered(self, scope: TurnScope) -> bool:
        return True

    async def run(self, scope: TurnScope, arguments: dict[str, Any]) -> str | Outcome:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return result(error="query must be the words to search for")
        query = query.strip()[:300]
        try:
            async with httpx.AsyncClient(timeout=SEARCH_TIMEOUT_S, trust_env=False, verify=self.tls) as http:
                response = await http.get(f"{self.base_url}/search", params={"q": query, "format": "json"})
            response.raise_for_status()
            found = response.json().get("results", [])
        except (httpx.HTTPError, ValueError, AttributeError) as failure:
            log.warning("search: the SearXNG instance at %s did not answer (%s)", self.base_url, failure)
            return result(error="the search service did not answer; say so, do not make results up")
        hits = [{"title": str(hit.get("title", "")), "url": str(hit.get("url", "")),
                 "snippet": str(hit.get("content", ""))}
                for hit in found[:SEARCH_RESULTS] if isinstance(hit, dict) and hit.get("url")]
        return Outcome(result(query=query, results=hits), shown=f"🔎 searched: {query}", outside="search results",
                       addresses=tuple(hit["url"] for hit in hits))


def page_text(body: bytes, content_type: str) -> str | None:
    """A page's readable text: HTML through trafilatura, plain text as it is; None for anything else."""
    kind = content_type.split(";")[0].strip().lower()
    text = body.decode("utf-8", errors="replace")
    if kind in ("text/html", "application/xhtml+xml", ""):
        return trafilatura.extract(text, include_comments=False, include_tables=True) or ""
    if kind == "text/plain":
        return text
    return None


class Read:
    name, spec, guidance = "read", READ, ""

    def __init__(self, egress: Egress):
        self.egress = egress

    def offered(self, scope: TurnScope) -> bool:
        return True

    async def run(self, scope: TurnScope, arguments: dict[str, Any]) -> str | Outcome:
        url = arguments.get("url")
        if not isinstance(url, str) or not url.strip():
            return result(error="url must be the page's address")
        url = url.strip()
        if _same(url) not in {_same(known) for known in scope.journal.addresses}:
            return result(error="only a page the person linked in their message, or one your search returned in "
                                "this reply, can be read")
        try:
            page = await self.egress.fetch(url)
        except EgressRefused as refused:
            return result(error=f"not read: {refused}")
        text = await asyncio.to_thread(page_text, page.body, page.content_type)
        if text is None:
            return result(error=f"not read: it is not a web page ({page.content_type or 'no type given'})")
        host = urlsplit(page.url).hostname or page.url
        said = text[:PAGE_CHARS] + ("\n[… the page goes on]" if page.cut or len(text) > PAGE_CHARS else "")
        return Outcome(said or "(the page has no readable text)", shown=f"📖 read: {host}",
                       outside=f"the web page {page.url}")
