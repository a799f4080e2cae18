"""The memory page's HTTP server (SPEC 21), in the page's own process (`python -m bot page`, which
every bot with `[web]` starts beside itself: bot/page/process.py).

- `/open/<code>` shows a button; pressing it (a POST: link previews that fetch the address spend
  nothing) exchanges the code for a session cookie — HttpOnly, SameSite=Strict, Secure under
  https, 12 hours — and moves to `/`, an address with no secret in it.
- Every request's cookie is checked in the database (`core.page.visit`): any process serves it.
- Every form carries the session's CSRF token; one without it is refused (403).
- Every response: `Content-Security-Policy: default-src 'self'` (and no framing), no referrer, no
  caching; no script anywhere, nothing from another site — a malformed body too (400, never a
  traceback).
- It holds against the open internet (`Connections`): at most MAX_CONNECTIONS open at once (well
  under the 1,024 files a service may open; past it a connection is closed as it comes, without
  a log line), each request's headers and body within READ_S, a kept-alive connection idle at
  most IDLE_S. Pages are made one at a time — a page's queries, then its drawing, in a thread —
  the others waiting their turn, and each begins after the last as long as PAGE_SHARE leaves the
  rest of the machine (pages are made at most a tenth of the time): a flood of page views
  takes one page's share of the CPU the bot's process shares it with (bench/page_flood.py). A
  session's requests are bounded too: at most SESSION_REQUESTS of them begin in any SESSION_WINDOW_S;
  past that a request is answered 429 after REFUSED_AFTER_S, without the database or the page's
  turn, so one session's flood makes a page a second, asks once a second on each connection and
  leaves the share to everyone else's; a person clicking through their page does not meet it.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import ipaddress
import logging
import math
from collections import deque
from email.parser import BytesParser
from email.policy import HTTP
from pathlib import Path
from typing import Awaitable, Callable

import jinja2
from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError

from adapters.web.chart import tokens_chart
from bot.contract import NOTHING_FORGOTTEN, MemoryPage, PageNotice, PageVisit

log = logging.getLogger(__name__)

COOKIE = "keepsake_session"
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # nothing to another site; the page itself sees its own Origin on a form
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}
NO_SESSION = ("This page needs a session. Send /memory page to the bot for a new link; it works once, "
              "within 10 minutes.")
FORM_REFUSED = "This form has expired or did not come from your page. Reload the page and try again."
TOO_MANY = "Too many requests from this page in a short while. Wait a few seconds, then reload the page."
ELSEWHERE = ("This link was sent from another site, not from your memory page, so it was not opened. "
             "Open the link you got from the bot yourself.")
TEMPLATES = Path(__file__).parent / "templates"
# The largest body the page reads: an import's file, a whole export at its longest — 240 memories of
# 500 characters, each up to 4 bytes, with their JSON fields — and far above any other form's text.
MAX_FORM_BYTES = 1024 * 1024
MAX_CONNECTIONS = 256  # open at once; a service's file limit is 1,024
READ_S = 10.0  # a request's headers and body, from when the connection (or its last answer) was ready
IDLE_S = 15.0  # a kept-alive connection waits this long for its next request
RENDERING = 4  # pages drawn at once (each in a thread); the others wait
PAGE_SHARE = 0.1  # the most of the time pages are made: the next begins 9× as long after the last as it took
SESSION_REQUESTS = 20  # a session's requests that may begin in any SESSION_WINDOW_S (SPEC 21: bounded)
SESSION_WINDOW_S = 20.0  # so a flood of one session's makes a page a second, after its first 20
REFUSED_AFTER_S = 1.0  # a refused request's answer waits this long: a flood's clients ask once a second each

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Watched(asyncio.Protocol):
    """One connection to the page: aiohttp's own handler, closed when its request does not
    arrive whole in time (a half-open connection never holds a file for long)."""

    def __init__(self, inner: asyncio.Protocol, connections: "Connections"):
        self.inner = inner
        self.connections = connections
        self.transport: asyncio.Transport | None = None
        self.busy = False  # a whole request is being answered
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.connections.open[transport] = self
        self.expect_within(READ_S)
        self.inner.connection_made(transport)

    def expect_within(self, seconds: float) -> None:
        """The next request must have arrived whole within `seconds`."""
        if self.timer is not None:
            self.timer.cancel()
        self.timer = asyncio.get_running_loop().call_later(seconds, self._late)

    def _late(self) -> None:
        if not self.busy and self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.connections.open.pop(self.transport, None)
        self.inner.connection_lost(exc)


class _Refused(asyncio.Protocol):
    """A connection past MAX_CONNECTIONS: closed as it comes."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.abort()  # type: ignore[attr-defined]


class Connections:
    """The page's connections: a protocol factory around aiohttp's (`make_handler`, set once the
    runner is ready), and the middleware that gives each request READ_S to arrive whole (its
    body read here, within what is left)."""

    def __init__(self) -> None:
        self.make_handler: Callable[[], asyncio.Protocol] = _Refused
        self.open: dict[asyncio.BaseTransport, _Watched] = {}

    def __call__(self) -> asyncio.Protocol:
        if len(self.open) >= MAX_CONNECTIONS:
            return _Refused()
        return _Watched(self.make_handler(), self)

    @web.middleware
    async def in_time(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        watched = self.open.get(request.transport) if request.transport is not None else None
        if watched is None:
            return await handler(request)
        await request.read()  # the body whole before anything is done (the deadline still runs)
        watched.busy = True
        try:
            return await handler(request)
        finally:
            watched.busy = False
            watched.expect_within(IDLE_S + READ_S)


@web.middleware
async def _safe_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as problem:  # a redirect, a 404 of the router: raised, with the headers too
        problem.headers.update(HEADERS)
        raise
    except (ValueError, LookupError, HttpProcessingError, web.RequestPayloadError) as problem:  # a malformed body
        log.info("a malformed request to the memory page was refused (%s)", type(problem).__name__)
        raise web.HTTPBadRequest(text="That request could not be read.", headers=HEADERS) from None
    response.headers.update(HEADERS)
    return response


async def form_fields(request: web.Request) -> dict[str, str]:
    """A form's fields (a file's as its text), from the body `Connections.in_time` read whole
    before the handler ran — which aiohttp's multipart reader would look for in the stream."""
    if request.content_type != "multipart/form-data":
        return {key: str(value) for key, value in (await request.post()).items()}
    head = f"Content-Type: {request.headers[hdrs.CONTENT_TYPE]}\r\n\r\n".encode("latin-1")
    message = BytesParser(policy=HTTP).parsebytes(head + await request.read())
    fields = {}
    for part in message.iter_parts():
        if name := part.get_param("name", header="content-disposition"):
            fields[str(name)] = (part.get_payload(decode=True) or b"").decode("utf-8", "replace")
    return fields


LOOPBACK = ("127.0.0.1/32", "::1/128")


def _trusted(address: str, proxies: tuple[str, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(network) for network in proxies)


def visitor(peer: str | None, forwarded_for: list[str], proxies: tuple[str, ...] = LOOPBACK) -> tuple[str, str | None]:
    """(the address wrong codes count against, the trusted proxy it came through or None). A peer
    among `proxies` (`[web] trusted_proxies`, default loopback) is believed about whom it
    forwards for: X-Forwarded-For, every header line of it in order, read from the right — the
    last entry is the one the proxy added, and an entry another trusted proxy added leads further
    left; anything before the first untrusted entry is the visitor's own words. A peer that is
    no trusted proxy is never believed."""
    if not peer or not _trusted(peer, proxies):
        return peer or "unknown", None
    entries = [entry.strip() for line in forwarded_for for entry in line.split(",")]
    found = peer
    for entry in reversed(entries):
        try:
            found = str(ipaddress.ip_address(entry))
        except ValueError:  # not an address: what the trusted hops said so far counts
            break
        if not _trusted(found, proxies):
            break
    return found, (peer if found != peer else None)


class PageServer:
    def __init__(self, page: MemoryPage, secure: bool, origin: str | None = None, path: str = "",
                 proxies: tuple[str, ...] = LOOPBACK):
        self.page = page
        self.secure = secure  # under https: the cookie is Secure
        self.origin = origin  # `[web] public_url`'s scheme and host, as a browser sends it in Origin
        self.path = path  # the prefix a proxy serves the page under ("" at the root)
        self.proxies = proxies  # `[web] trusted_proxies`
        self.addresses: list = []  # where `serve` listens, once it does
        self.templates = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                                            undefined=jinja2.StrictUndefined)
        self.templates.globals["root"] = path  # every link, form and the stylesheet under it
        self.rendering = asyncio.Semaphore(RENDERING)
        self.one_page = asyncio.Lock()  # pages are made one at a time (their queries and drawing)
        self.next_page_at = 0.0  # on the event loop's clock: when the next may begin (PAGE_SHARE)
        self.asked: dict[str, deque[float]] = {}  # a live session's token: when its latest requests began
        self.connections = Connections()

    def app(self) -> web.Application:
        app = web.Application(middlewares=[_safe_headers, self.connections.in_time], client_max_size=MAX_FORM_BYTES)
        signed_in, form = self._signed_in, functools.partial(self._signed_in, form=True)
        app.add_routes([
            web.get("/open/{code}", self.open_link), web.post("/open", self.enter), web.get("/style.css", self.style),
            web.get("/", signed_in(self.person)), web.post("/act/{action}", form(self.act)),
            web.get("/export", signed_in(self.export)), web.get("/export.md", signed_in(self.export_markdown)),
            web.post("/import", form(self.import_export)), web.get("/forget", signed_in(self.forget_question)),
            web.post("/forget", form(self.forget)), web.post("/leave", form(self.leave)),
            web.get("/owner", signed_in(self.owner)),
        ])
        return app

    async def start(self, listen: str, port: int) -> Callable[[], Awaitable[None]]:
        """Listen on `listen`:`port` (OSError when it cannot be bound); what stops serving."""
        runner = web.AppRunner(self.app(), access_log=None, keepalive_timeout=IDLE_S)
        await runner.setup()
        self.connections.make_handler = runner.server
        try:
            server = await asyncio.get_running_loop().create_server(self.connections, listen, port)
        except OSError:
            await runner.cleanup()
            raise
        self.addresses = [socket.getsockname() for socket in server.sockets]
        log.info("the memory page is served at http://%s:%d", listen, port)

        async def stop() -> None:
            server.close()
            for transport in list(self.connections.open):
                transport.abort()
            await runner.cleanup()
        return stop

    async def serve(self, listen: str, port: int, stop: asyncio.Event) -> None:
        """Serve until `stop` is set."""
        stop_serving = await self.start(listen, port)
        try:
            await stop.wait()
        finally:
            await stop_serving()

    # -- rendering ------------------------------------------------------------------------------
    async def render(self, template: str, status: int = 200, **values) -> web.Response:
        """A page drawn in a thread, at most RENDERING at once: a flood of page views never
        stalls the bot's turns on the event loop."""
        async with self.rendering:
            html = await asyncio.to_thread(self.templates.get_template(template).render, **values)
        return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")

    async def message(self, text: str, status: int) -> web.Response:
        return await self.render("message.html", status, text=text)

    def _signed_in(self, handler: Callable[..., Awaitable[web.Response]], form: bool = False) -> Handler:
        """A page of a session: the cookie's token checked in the database on every request, the
        page made while no other is (`one_page`), and after the last one, a while as long as
        PAGE_SHARE leaves the bot. While its session has begun SESSION_REQUESTS requests in the last
        SESSION_WINDOW_S, a request is refused (429, after REFUSED_AFTER_S) without waiting for
        another's page, and again once it holds `one_page` (another request of the session may
        have gone first). A `form` is read first (a slow sender holds no page up) and refused
        (403) unless it carries the session's CSRF token."""
        async def run(request: web.Request) -> web.Response:
            fields = await form_fields(request) if form else None
            token = request.cookies.get(COOKIE, "")
            clock = asyncio.get_running_loop().time
            if self._next_request_at(token) <= clock():
                async with self.one_page:
                    if self._next_request_at(token) <= clock():  # no other request of the session went first
                        await asyncio.sleep(self.next_page_at - clock())
                        began = clock()
                        try:
                            return await self._made(request, handler, token, fields)
                        finally:  # the bot's turns have the rest of the time
                            self.next_page_at = clock() + (clock() - began) * (1 / PAGE_SHARE - 1)
            # plain text, drawn by no template, and only after a pause: a flood's answers cost the
            # least they can, and a client that waits for its answer (browsers and scripts do)
            # asks once a second, not as fast as the machine answers
            await asyncio.sleep(REFUSED_AFTER_S)
            return web.Response(text=TOO_MANY, status=429, headers={
                "Retry-After": str(max(1, math.ceil(self._next_request_at(token) - clock())))})
        return run

    def _next_request_at(self, token: str) -> float:
        """When the session's next request may begin: SESSION_WINDOW_S after the first of its
        last SESSION_REQUESTS."""
        began = self.asked.get(token, ())
        return began[0] + SESSION_WINDOW_S if len(began) == SESSION_REQUESTS else 0.0

    def _counted(self, token: str) -> None:
        """A request of a live session begins (a bad token is kept nowhere); the sessions with
        none in the last SESSION_WINDOW_S are let go."""
        now = asyncio.get_running_loop().time()
        self.asked = {t: began for t, began in self.asked.items() if began[-1] > now - SESSION_WINDOW_S}
        self.asked.setdefault(token, deque(maxlen=SESSION_REQUESTS)).append(now)

    async def _made(self, request: web.Request, handler: Callable[..., Awaitable[web.Response]], token: str,
                    fields: dict[str, str] | None) -> web.Response:
        visit = await self.page.visit(token) if token else None
        if visit is None:
            return await self.message(NO_SESSION, 401)
        self._counted(token)
        if fields is None:
            return await handler(request, visit)
        if not hmac.compare_digest(fields.pop("csrf", "").encode(), visit.csrf.encode()):
            return await self.message(FORM_REFUSED, 403)
        return await handler(request, visit, fields)

    # -- the door ---------------------------------------------------------------------------------
    async def open_link(self, request: web.Request) -> web.Response:
        return await self.render("open.html", code=request.match_info["code"])

    def from_the_page(self, request: web.Request) -> bool:
        """Whether a form was sent from the page itself (SPEC 21 "No login from another site"):
        the browser's `Sec-Fetch-Site` says same-origin, or its `Origin` is the page's own
        (`public_url`'s, or the address it was asked at). A request that says neither is refused:
        every browser that can run the page sends one of them with a form (the page's
        Referrer-Policy, same-origin, lets it send its real Origin rather than "null")."""
        site = request.headers.get("Sec-Fetch-Site")  # sent by browsers to a secure context (https, loopback)
        if site is not None:
            return site == "same-origin"
        origin = request.headers.get("Origin")
        if origin is None:
            return False
        own = {f"{scheme}://{request.host}".lower() for scheme in ("http", "https")} | {(self.origin or "").lower()}
        return origin.lower() in own

    async def enter(self, request: web.Request) -> web.Response:
        if not self.from_the_page(request):
            log.info("a code sent to the memory page from another site was refused")
            return await self.message(ELSEWHERE, 403)
        code = str((await request.post()).get("code", ""))
        address, via = visitor(request.remote, request.headers.getall("X-Forwarded-For", []), self.proxies)
        entry = await self.page.enter(code, address, via)
        if entry.token is None:
            return await self.message(entry.refusal, 429 if entry.too_many else 403)
        response = web.HTTPSeeOther(f"{self.path}/")
        response.set_cookie(COOKIE, entry.token, max_age=entry.lasts_s, path=f"{self.path}/", httponly=True,
                            samesite="Strict", secure=self.secure)
        raise response

    async def leave(self, request: web.Request, visit: PageVisit, fields: dict[str, str]) -> web.Response:
        await self.page.leave(visit.token)
        response = await self.message("You left your memory page. A new link opens it again.", 200)
        response.del_cookie(COOKIE, path=f"{self.path}/")
        return response

    # -- the person's page ------------------------------------------------------------------------
    async def person(self, request: web.Request, visit: PageVisit, notice: PageNotice | None = None,
                     status: int = 200) -> web.Response:
        return await self.render("person.html", status, page=await self.page.person_page(visit), csrf=visit.csrf,
                           notice=notice)

    async def act(self, request: web.Request, visit: PageVisit, fields: dict[str, str]) -> web.Response:
        notice = await self.page.act(visit, request.match_info["action"], fields)
        return await self.person(request, visit, notice, 404 if notice.missing else 200 if notice.ok else 400)

    async def export(self, request: web.Request, visit: PageVisit, format: str = "json") -> web.Response:
        attachment = await self.page.export(visit, format)
        kind = "application/json" if format == "json" else "text/markdown"
        return web.Response(body=attachment.data, content_type=kind, charset="utf-8", headers={
            "Content-Disposition": f'attachment; filename="{attachment.filename}"'})

    async def export_markdown(self, request: web.Request, visit: PageVisit) -> web.Response:
        return await self.export(request, visit, "markdown")

    async def import_export(self, request: web.Request, visit: PageVisit, fields: dict[str, str]) -> web.Response:
        notice = await self.page.import_export(visit, fields.get("export", ""))
        return await self.person(request, visit, notice, 200 if notice.ok else 400)

    async def forget_question(self, request: web.Request, visit: PageVisit) -> web.Response:
        return await self.render("forget.html", csrf=visit.csrf)

    async def forget(self, request: web.Request, visit: PageVisit, fields: dict[str, str]) -> web.Response:
        if fields.get("confirm") != "yes":
            return await self.render("forget.html", 400, csrf=visit.csrf)
        if not await self.page.forget(visit):
            return await self.message(NOTHING_FORGOTTEN, 409)
        response = await self.message("Done. Everything stored about you is deleted.", 200)  # the session went too
        response.del_cookie(COOKIE, path=f"{self.path}/")
        return response

    # -- the owner's page -------------------------------------------------------------------------
    async def owner(self, request: web.Request, visit: PageVisit) -> web.Response:
        page = await self.page.owner_page(visit)
        if page is None:
            return await self.message("This page is for the bot's owner only.", 403)
        chart = await asyncio.to_thread(tokens_chart, page.days)
        return await self.render("owner.html", page=page, chart=chart, csrf=visit.csrf)

    async def style(self, request: web.Request) -> web.Response:
        return web.Response(text=(TEMPLATES / "style.css").read_text(), content_type="text/css")
