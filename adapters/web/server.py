"""The memory page's HTTP server (SPEC 21), in every bot process that has `[web]`.

- `/open/<code>` shows a button; pressing it (a POST: link previews that fetch the address spend
  nothing) exchanges the code for a session cookie — HttpOnly, SameSite=Strict, Secure under
  https, 12 hours — and moves to `/`, an address with no secret in it.
- Every request's cookie is checked in the database (`core.page.visit`): any process serves it.
- Every form carries the session's CSRF token; one without it is refused (403).
- Every response: `Content-Security-Policy: default-src 'self'` (and no framing), no referrer, no
  caching; no script anywhere, nothing from another site.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
from pathlib import Path
from typing import Awaitable, Callable

import jinja2
from aiohttp import web

from adapters.web.chart import tokens_chart
from bot.contract import MemoryPage, PageNotice, PageVisit

log = logging.getLogger(__name__)

COOKIE = "keepsake_session"
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}
NO_SESSION = ("This page needs a session. Send /memory page to the bot for a new link; it works once, "
              "within 10 minutes.")
FORM_REFUSED = "This form has expired or did not come from your page. Reload the page and try again."
TEMPLATES = Path(__file__).parent / "templates"
MAX_FORM_BYTES = 64 * 1024  # far above the longest text a form takes (a persona, 1,000 characters)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _safe_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as problem:  # a redirect, a 404 of the router: raised, with the headers too
        problem.headers.update(HEADERS)
        raise
    response.headers.update(HEADERS)
    return response


def visitor(peer: str | None, forwarded_for: str | None) -> str:
    """The address wrong codes count against: the peer's; behind a reverse proxy on this machine
    (the peer is loopback, the set-up docs/memory-page.md gives), the address the proxy forwards
    for — the last of X-Forwarded-For, the one the proxy adds (any before it are the visitor's
    own words). A peer elsewhere is never believed about whom it forwards for."""
    if peer and forwarded_for:
        try:
            if ipaddress.ip_address(peer).is_loopback:
                return str(ipaddress.ip_address(forwarded_for.rsplit(",", 1)[-1].strip()))
        except ValueError:  # not an address: the peer's counts
            pass
    return peer or "unknown"


class PageServer:
    def __init__(self, page: MemoryPage, secure: bool):
        self.page = page
        self.secure = secure  # under https: the cookie is Secure
        self.addresses: list = []  # where `serve` listens, once it does
        self.templates = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                                            undefined=jinja2.StrictUndefined)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[_safe_headers], client_max_size=MAX_FORM_BYTES)
        signed_in, form = self._signed_in, self._form_of_page
        app.add_routes([
            web.get("/open/{code}", self.open_link), web.post("/open", self.enter), web.get("/style.css", self.style),
            web.get("/", signed_in(self.person)), web.post("/act/{action}", form(self.act)),
            web.get("/export", signed_in(self.export)), web.get("/forget", signed_in(self.forget_question)),
            web.post("/forget", form(self.forget)), web.post("/leave", form(self.leave)),
            web.get("/owner", signed_in(self.owner)),
        ])
        return app

    async def serve(self, listen: str, port: int, stop: asyncio.Event) -> None:
        """Serve until `stop` is set."""
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, listen, port).start()
            self.addresses = list(runner.addresses)
            log.info("the memory page is served at http://%s:%d", listen, port)
            await stop.wait()
        finally:
            await runner.cleanup()

    # -- rendering ------------------------------------------------------------------------------
    def render(self, template: str, status: int = 200, **values) -> web.Response:
        html = self.templates.get_template(template).render(**values)
        return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")

    def message(self, text: str, status: int) -> web.Response:
        return self.render("message.html", status, text=text)

    def _signed_in(self, handler: Callable[..., Awaitable[web.Response]]) -> Handler:
        """A page of a session: the cookie's token checked in the database on every request."""
        async def run(request: web.Request) -> web.Response:
            token = request.cookies.get(COOKIE, "")
            visit = await self.page.visit(token) if token else None
            if visit is None:
                return self.message(NO_SESSION, 401)
            return await handler(request, visit)
        return run

    def _form_of_page(self, handler: Callable[..., Awaitable[web.Response]]) -> Handler:
        """A form of a session's page: refused (403) unless it carries the session's CSRF token."""
        async def run(request: web.Request, visit: PageVisit) -> web.Response:
            fields = {key: str(value) for key, value in (await request.post()).items()}
            if not hmac.compare_digest(fields.pop("csrf", "").encode(), visit.csrf.encode()):
                return self.message(FORM_REFUSED, 403)
            return await handler(request, visit, fields)
        return self._signed_in(run)

    # -- the door ---------------------------------------------------------------------------------
    async def open_link(self, request: web.Request) -> web.Response:
        return self.render("open.html", code=request.match_info["code"])

    async def enter(self, request: web.Request) -> web.Response:
        code = str((await request.post()).get("code", ""))
        entry = await self.page.enter(code, visitor(request.remote, request.headers.get("X-Forwarded-For")))
        if entry.token is None:
            return self.message(entry.refusal, 429 if entry.too_many else 403)
        response = web.HTTPSeeOther("/")
        response.set_cookie(COOKIE, entry.token, max_age=entry.lasts_s, path="/", httponly=True, samesite="Strict",
                            secure=self.secure)
        raise response

    async def leave(self, request: web.Request, visit: PageVisit, fields: dict[str, str]) -> web.Response:
        await self.page.leave(visit.token)
        response = self.message("You left your memory page. A new link opens it again.", 200)
        response.del_cookie(COOKIE, path="/")
        return response

    # -- the person's page ------------------------------------------------------------------------
    async def person(self, request: web.Request, visit: PageVisit, notice: PageNotice | None = None,
                     status: int = 200) -> web.Response:
        return self.render("person.html", status, page=await self.page.person_page(visit), csrf=visit.csrf,
                           notice=notice)

    async def act(self, request: web.Request, visit: PageVisit, fields: dict[str, str]) -> web.Response:
        notice = await self.page.act(visit, request.match_info["action"], fields)
        return await self.person(request, visit, notice, 404 if notice.missing else 200 if notice.ok else 400)

    async def export(self, request: web.Request, visit: PageVisit) -> web.Response:
        attachment = await self.page.export(visit)
        return web.Response(body=attachment.data, content_type="application/json", headers={
            "Content-Disposition": f'attachment; filename="{attachment.filename}"'})

    async def forget_question(self, request: web.Request, visit: PageVisit) -> web.Response:
        return self.render("forget.html", csrf=visit.csrf)

    async def forget(self, request: web.Request, visit: PageVisit, fields: dict[str, str]) -> web.Response:
        if fields.get("confirm") != "yes":
            return self.render("forget.html", 400, csrf=visit.csrf)
        await self.page.forget(visit)  # the session goes with the person
        response = self.message("Done. Everything stored about you is deleted.", 200)
        response.del_cookie(COOKIE, path="/")
        return response

    # -- the owner's page -------------------------------------------------------------------------
    async def owner(self, request: web.Request, visit: PageVisit) -> web.Response:
        page = await self.page.owner_page(visit)
        if page is None:
            return self.message("This page is for the bot's owner only.", 403)
        return self.render("owner.html", page=page, chart=tokens_chart(page.days), csrf=visit.csrf)

    async def style(self, request: web.Request) -> web.Response:
        return web.Response(text=(TEMPLATES / "style.css").read_text(), content_type="text/css")
