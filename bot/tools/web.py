"""`search` and `read` (SPEC 18): looking something up through the owner's SearXNG, and reading a
web page. Both talk to the outside, so everything they answer — results, text, and errors that
quote what a server sent — is outside text, fenced as data by the toolbox. Both go through the
process's one outside client (bot/tools/outside.py): 10 s for the whole call, the decoded bytes
capped (a search's answer at SEARCH_BYTES, a page at `[tools.read] max_bytes`), every field of a
result capped. `read` opens only an address the person wrote in this turn's message or a search
returned in this turn — outside text cannot send the character elsewhere — and only through the
safe egress (bot/tools/egress.py). A page's text is taken out of its HTML in a child process
(bot/tools/page_text.py), bounded in time."""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import urlencode, urlsplit

from bot.tools.egress import Egress
from bot.tools.outside import Answered, Limits, Outside, OutsideFailed
from bot.tools.page_text import EXTRACT_S, Unreadable, page_text
from bot.tools.toolbox import Outcome, TurnScope, result

log = logging.getLogger(__name__)
SEARCH_RESULTS = 5
SEARCH_TIMEOUT_S = 10.0
SEARCH_BYTES = 1_000_000  # of SearXNG's answer, decoded
SNIPPET_CHARS = 1_000  # each search result's snippet (SPEC 18); its title TITLE_CHARS, its address URL_CHARS
TITLE_CHARS = 300
URL_CHARS = 2_000
PAGE_CHARS = 20_000  # of a page's text, before the toolbox cuts it to its token budget
CHECK_QUERY = "keepsake start-up check"  # the one search a process makes at start, to find a refusal early
CHECK_S = 5.0
NO_JSON = ("it refuses JSON (HTTP 403): add json to search.formats in its settings.yml "
           "(formats: [html, json]) and restart it")
HTML = ("text/html", "application/xhtml+xml", "")

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
    source = "search results"

    def __init__(self, base_url: str, outside: Outside):
        self.base_url = base_url.rstrip("/").removesuffix("/search")  # the instance, or its search page
        self.outside = outside

    async def _ask(self, query: str, limits: Limits) -> list:
        """The instance's results for `query`, or OutsideFailed/ValueError saying why not."""
        try:
            answer = await self.outside.call("GET", f"{self.base_url}/search?{urlencode({'q': query, 'format': 'json'})}",
                                             limits)
        except Answered as refused:
            raise OutsideFailed(NO_JSON) if refused.status == 403 else refused
        found = json.loads(answer.body).get("results", [])
        if not isinstance(found, list):
            raise ValueError("results is not a list")
        return found

    async def check(self) -> str | None:
        """One search at start-up (as MCP servers are asked for their tools): the problem, in one
        line naming the fix, or None."""
        try:
            await self._ask(CHECK_QUERY, Limits(CHECK_S, SEARCH_BYTES))
        except (OutsideFailed, ValueError, AttributeError) as failure:
            return f"[tools.search] url: the SearXNG instance at {self.base_url} does not answer searches: {failure}"
        return None

    def offered(self, scope: TurnScope) -> bool:
        return True

    async def run(self, scope: TurnScope, arguments: dict[str, Any]) -> str | Outcome:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return result(error="query must be the words to search for")
        query = " ".join(query.split())[:300]
        try:
            found = await self._ask(query, Limits(SEARCH_TIMEOUT_S, SEARCH_BYTES))
        except (OutsideFailed, ValueError, AttributeError) as failure:
            log.warning("search: the SearXNG instance at %s did not answer usably (%s)", self.base_url,
                        str(failure)[:200])
            return result(error="the search service did not answer; say so, do not make results up")
        hits = [{"title": str(hit.get("title", ""))[:TITLE_CHARS], "url": str(hit.get("url", ""))[:URL_CHARS],
                 "snippet": str(hit.get("content", ""))[:SNIPPET_CHARS]}
                for hit in found[:SEARCH_RESULTS] if isinstance(hit, dict) and hit.get("url")]
        return Outcome(result(query=query, results=hits), shown=f"🔎 searched: {query}",
                       addresses=tuple(hit["url"] for hit in hits))


class Read:
    name, spec, guidance = "read", READ, ""
    source = "a web page"  # its address is outside text too: it stands inside the fence, never in the label

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
            kind = page.content_type.split(";")[0].strip().lower()
            if kind == "text/plain":
                text = page.body.decode("utf-8", errors="replace")
            elif kind in HTML:
                text = await self.egress.outside.within(EXTRACT_S + 1, lambda: page_text(page.body, EXTRACT_S))
            else:
                return result(error=f"not read: it is not a web page ({page.content_type[:100]})")
        except (OutsideFailed, Unreadable) as why:
            return result(error=f"not read: {why}")
        host = urlsplit(page.url).hostname or "the page"
        said = text[:PAGE_CHARS] + ("\n[… the page goes on]" if page.cut or len(text) > PAGE_CHARS else "")
        return Outcome(f"{page.url}\n{said or '(the page has no readable text)'}", shown=f"📖 read: {host}")
