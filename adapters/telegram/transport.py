"""How updates reach a Telegram adapter, kept apart from what it does with them (as PTB keeps
its `Updater` apart from the `Application`): our own long-polling loop into PTB's update queue,
or, with `mode = "webhook"`, our own webhook server, which hands each update to PTB itself and
acknowledges it once its message is kept. Either way every handler is shared."""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import time
from typing import Any, Awaitable, Callable, Protocol
from urllib.parse import urlsplit

from aiohttp import web
from telegram import Update
from telegram.error import RetryAfter, TelegramError
from telegram.ext import Application

from adapters.settings import TelegramSettings
from adapters.telegram.messages import flood_wait
from bot.contract import cannot_listen

log = logging.getLogger(__name__)

POLL_TIMEOUT_S = 10
KEEP_WAIT_S = 10.0  # a webhook update is acknowledged by then at the latest
POLL_RETRY_MAX_S = 60.0

Refusable = Callable[[Awaitable[Any]], Awaitable[Any]]  # a Bot API call where a refused token stops the adapter


class Transport(Protocol):
    gathers_albums: bool  # an album's items may wait for each other before any is acknowledged (albums.py)

    async def run(self, application: Application, stop: asyncio.Event) -> None:
        """Bring updates into `application` until `stop` is set."""

    def kept_signal(self, update: Update) -> Callable[[], None] | None:
        """What tells the sender that an update's message is kept (None: nobody waits)."""


async def pause(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except asyncio.TimeoutError:
        pass


def _update_from(data: Any, bot) -> Update:
    """A webhook body as an Update; raises for anything else ([], {}, null, {"message": 7})."""
    update_id = data.get("update_id") if isinstance(data, dict) else None
    if isinstance(update_id, bool) or not isinstance(update_id, int):
        raise ValueError("no update_id")
    return Update.de_json(data, bot)


class OncePerMinute:
    """A WARNING at most once a minute (SPEC 9: a flood of bad requests is no flood of log
    lines); the next one says how many were held back."""

    def __init__(self) -> None:
        self.last, self.held = -math.inf, 0

    def warn(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self.last < 60:
            self.held += 1
            return
        if self.held:
            message += f" ({self.held} more in the minute before)"
        log.warning(message, *args)
        self.last, self.held = now, 0


class Polling:
    """Long-polls getUpdates into the application's queue. Network trouble is retried with
    backoff; a refused token (HTTP 401) stops the adapter for good."""

    gathers_albums = True  # nobody waits for an acknowledgement

    def __init__(self, refusable: Refusable):
        self.refusable = refusable

    def kept_signal(self, update: Update) -> Callable[[], None] | None:
        return None

    async def run(self, application: Application, stop: asyncio.Event) -> None:
        bot = application.bot
        await self.refusable(bot.delete_webhook())  # polling and a webhook exclude each other
        offset: int | None = None
        delay = 1.0
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                fetch = asyncio.create_task(bot.get_updates(
                    offset=offset, timeout=POLL_TIMEOUT_S, allowed_updates=Update.ALL_TYPES))
                await asyncio.wait({fetch, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not fetch.done():
                    fetch.cancel()
                    await asyncio.gather(fetch, return_exceptions=True)
                    break
                try:
                    updates = await self.refusable(fetch)
                except RetryAfter as flood:
                    await pause(stop, flood_wait(flood))
                    continue
                except TelegramError as failure:
                    log.warning("Telegram: fetching updates failed (%s); retrying in %.0f s", failure, delay)
                    await pause(stop, delay)
                    delay = min(delay * 2, POLL_RETRY_MAX_S)
                    continue
                delay = 1.0
                for update in updates:
                    await application.update_queue.put(update)
                    offset = update.update_id + 1
            if offset is not None:  # confirm what was fetched, so it is not fetched again
                try:
                    await bot.get_updates(offset=offset, timeout=0)
                except TelegramError as failure:
                    log.debug("Telegram: confirming the last updates failed: %s", failure)
        finally:
            stopping.cancel()


class WebhookServer:
    """Serves PTB's updates on [telegram] listen:port at webhook_url's path: Telegram posts each
    update with the secret token; anything without it gets 403 and is dropped. An update is
    acknowledged once its message is stored and queued for its turn (or its handler is done, or
    KEEP_WAIT_S passed): a crash before that makes Telegram deliver it again, and updates posted
    one after another to several processes behind a load balancer keep their order. GET /healthz
    answers 200 while the adapter runs."""

    gathers_albums = False  # Telegram posts a chat's next update only once this one is acknowledged

    def __init__(self, settings: TelegramSettings, name: str, refusable: Refusable):
        self.settings, self.name, self.refusable = settings, name, refusable
        self._keeping: dict[int, asyncio.Future] = {}  # updates waiting for their message to be kept
        self._malformed = OncePerMinute()  # bodies that are no update

    def kept_signal(self, update: Update) -> Callable[[], None] | None:
        waiting = self._keeping.get(update.update_id)
        if waiting is None:
            return None
        return lambda: None if waiting.done() else waiting.set_result(None)

    async def run(self, application: Application, stop: asyncio.Event) -> None:
        settings = self.settings
        secret = settings.secret_token

        async def receive(request: web.Request) -> web.Response:
            given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
            if not hmac.compare_digest(given.encode(), secret.encode()):  # constant time
                return web.Response(status=403, text="wrong secret token")
            try:
                update = _update_from(await request.json(), application.bot)
            except Exception as problem:  # anything a caller can post that is no update
                self._malformed.warn("Telegram webhook of %s: a body that is not an update was refused with 400 "
                                     "(%s); further ones are counted quietly for a minute",
                                     self.name, type(problem).__name__)
                return web.Response(status=400, text="not an update")
            kept = asyncio.get_running_loop().create_future()
            self._keeping[update.update_id] = kept
            try:
                handled = application.create_task(application.process_update(update), update=update)
                await asyncio.wait({handled, kept}, timeout=KEEP_WAIT_S, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._keeping.pop(update.update_id, None)
            return web.Response(text="ok")

        async def healthz(request: web.Request) -> web.Response:
            return web.json_response({"ok": True, "character": self.name})

        server = web.Application()
        server.router.add_post(urlsplit(settings.webhook_url).path or "/", receive)
        server.router.add_get("/healthz", healthz)
        runner = web.AppRunner(server, access_log=None)
        await runner.setup()
        try:
            try:
                await web.TCPSite(runner, settings.listen, settings.port).start()
            except OSError as problem:  # the adapter is started again later
                raise OSError(problem.errno, cannot_listen("telegram", "the webhook", settings.listen, settings.port,
                                                           problem)) from None
            await self.refusable(application.bot.set_webhook(
                settings.webhook_url, secret_token=secret, allowed_updates=Update.ALL_TYPES))
            log.info("Telegram: %s takes updates at %s (serving %s:%d)", self.name,
                     settings.webhook_url, settings.listen, settings.port)
            await stop.wait()
        finally:
            await runner.cleanup()

