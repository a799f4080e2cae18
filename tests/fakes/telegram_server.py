"""A fake Telegram Bot API server on 127.0.0.1, reached by a real python-telegram-bot
Application built with `.base_url(...)`.

It answers `/bot<token>/<method>` the way Telegram does (form-encoded requests, `{"ok": ...}`
answers), keeps every chat's messages as a person would see them (edits applied), checks HTML
parse mode like Telegram (unknown tags, unclosed tags and bare `&` are "can't parse entities"),
enforces the 4,096-character limit, long-polls `getUpdates`, and can inject a 429 RetryAfter or
a 403 "bot can't initiate conversation" on a method.
"""

from __future__ import annotations

import asyncio
import contextvars
import html
import itertools
import json
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import aiohttp
from aiohttp import web

from tests.audio import is_ogg_opus, seconds_of

ALLOWED_TAGS = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler",
                "a", "code", "pre", "blockquote", "tg-emoji"}
MAX_TEXT = 4096


class _EntityCheck(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag not in ALLOWED_TAGS:
            self.error = self.error or f"Unsupported start tag \"{tag}\""
        self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.error = self.error or f"Unexpected end tag \"{tag}\""
        else:
            self.stack.pop()

    def handle_data(self, data):
        if "<" in data or ">" in data:
            self.error = self.error or "Unsupported start tag"
        self.text.append(data)

    def handle_entityref(self, name):
        if name not in ("lt", "gt", "amp", "quot"):
            self.error = self.error or f"Unsupported entity \"{name}\""
        self.text.append(html.unescape(f"&{name};"))

    def handle_charref(self, name):
        self.text.append(html.unescape(f"&#{name};"))


def parse_html(text: str) -> tuple[str | None, str]:
    """(error, visible text) for a message sent with parse_mode HTML."""
    if re.search(r"&(?!(lt|gt|amp|quot|#\d+|#x[0-9a-fA-F]+);)", text):
        return "Can't find end of the entity starting at byte offset", text
    checker = _EntityCheck()
    checker.feed(text)
    checker.close()
    if checker.error is None and checker.stack:
        checker.error = f"Can't find end tag corresponding to start tag \"{checker.stack[-1]}\""
    return checker.error, "".join(checker.text)


@dataclass
class ChatMessage:
    message_id: int
    chat_id: int
    text: str
    sender_id: int
    parse_mode: str | None = None
    reply_markup: dict | None = None
    thread_id: int | None = None
    reply_to: int | None = None
    document: dict | None = None
    voice: dict | None = None  # a voice note the bot sent: its bytes, duration, and whether it is Ogg/Opus
    photo: bytes | None = None  # a picture the bot sent (sendPhoto)
    edits: int = 0

    def buttons(self) -> list[dict]:
        return [b for row in (self.reply_markup or {}).get("inline_keyboard", []) for b in row]


@dataclass
class OtherBot:
    """Another bot of the same server (a scene's second character, SPEC 15), in privacy mode: it
    gets a group's messages that mention it or reply to it, and presses on its own messages."""

    token: str
    bot_id: int
    username: str
    first_name: str
    updates: list[dict] = field(default_factory=list)
    new_update: asyncio.Event = field(default_factory=asyncio.Event)

    def user(self) -> dict:
        return {"id": self.bot_id, "is_bot": True, "first_name": self.first_name, "username": self.username}

    def hears(self, update: dict) -> bool:
        message = update.get("message") or update.get("edited_message")
        if message is None:
            query = update.get("callback_query")
            return query is not None and query["message"]["from"]["id"] == self.bot_id
        text = message.get("text") or message.get("caption") or ""
        replied = message.get("reply_to_message")
        return f"@{self.username}".lower() in text.lower() or (replied is not None and replied["from"]["id"] == self.bot_id)


def _entities(text: str, *, command: bool) -> list[dict]:
    """The entities Telegram marks in a message's text: @mentions, and a leading /command."""
    entities = [{"type": "mention", "offset": match.start(), "length": match.end() - match.start()}
                for match in re.finditer(r"@\w+", text)]
    if command and text.startswith("/"):
        entities.append({"type": "bot_command", "offset": 0, "length": len(text.split()[0])})
    return entities


@dataclass
class FakeTelegram:
    token: str = "123456:TEST-TOKEN"
    bot_id: int = 123456
    username: str = "mira_bot"
    calls: list[tuple[str, dict]] = field(default_factory=list)
    chats: dict[int, list[ChatMessage]] = field(default_factory=lambda: defaultdict(list))
    failures: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    blocked_dms: set[int] = field(default_factory=set)  # users who never started the bot
    outside: set[tuple[int, int]] = field(default_factory=set)  # (bot id, group id): a bot not in a group
    stalled: str | None = None  # a sendMessage whose markup holds this text hangs, and is never delivered
    refused: str | None = None  # a sendMessage whose text holds this is refused (403)
    gone: set[int] = field(default_factory=set)  # chats that are no more: 400 "chat not found"
    migrated: dict[int, int] = field(default_factory=dict)  # a group upgraded to a supergroup: old id → new id
    joins_groups: bool = True  # False: a DM-only bot (BotFather → /setjoingroups → Disable)
    refusal_held: asyncio.Event | None = None  # set: that refusal waits for it (a send still under way)
    polled_by: list = field(default_factory=list)  # the PTB Applications of a test's polling adapters (settled)
    presses_kept_s: float = 15.0  # a press answered later than this is too old (Telegram's is a few seconds)

    def __post_init__(self) -> None:
        self._updates: list[dict] = []
        self._new_update = asyncio.Event()
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1000)
        self.files: dict[str, bytes] = {}  # file_id → bytes, served through getFile
        self._sent: dict[tuple[int, int], dict] = {}  # what people sent, as Telegram gave it: (chat, message) → Message
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        self.other_bots: dict[str, OtherBot] = {}  # by token
        self._asking: contextvars.ContextVar[OtherBot | None] = contextvars.ContextVar("asking", default=None)
        self._pressed_at: dict[str, float] = {}  # callback query id → when it was pressed

    def add_bot(self, token: str, bot_id: int, username: str, first_name: str) -> OtherBot:
        bot = OtherBot(token, bot_id, username, first_name)
        self.other_bots[token] = bot
        return bot

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.*}", self._file)
        self._runner = web.AppRunner(app, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/bot"
        return self.base_url

    async def stop(self) -> None:
        self._new_update.set()
        if self._runner:
            await self._runner.cleanup()

    # -- what the tests do -------------------------------------------------------------------
    def fail_next(self, method: str, *, retry_after: int | None = None, status: int = 429,
                  description: str = "Too Many Requests") -> None:
        answer: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
        if retry_after is not None:
            answer["parameters"] = {"retry_after": retry_after}
            answer["description"] = f"Too Many Requests: retry after {retry_after}"
        self.failures[method].append(answer)

    def user(self, user_id: int, first_name: str, is_bot: bool = False) -> dict:
        return {"id": user_id, "is_bot": is_bot, "first_name": first_name, "username": first_name.lower()}

    def anonymous_admin(self) -> dict:
        """The account Telegram puts in `from` for every anonymous group admin, in every group."""
        return self.user(1087968824, "Group", is_bot=True) | {"username": "GroupAnonymousBot"}

    def revoke_token(self) -> None:
        """The bot's token stops working (revoked in @BotFather): every call answers HTTP 401."""
        self.token = self.token + "-revoked"

    def chat(self, chat_id: int, kind: str = "private", title: str = "Tavern") -> dict:
        return {"id": chat_id, "type": kind, **({"title": title, "is_forum": False} if kind != "private" else {})}

    def send(self, chat: dict, user: dict | None, text: str, *, reply_to: int | None = None,
             thread_id: int | None = None, sender_chat: dict | None = None, photo: bool | bytes = False,
             sticker: bool = False, document: tuple[str, str, bytes] | None = None,
             voice: bytes | None = None, seconds: int | None = None, size: int | None = None,
             spoken_as: str = "voice", album: str | None = None) -> int:
        """A person sends a message; returns its message id. `sender_chat`: sent on behalf of a
        chat (an anonymous admin, "send as channel"); `photo` (True, or the image's bytes):
        `text` is the photo's caption; `document`: (file name, MIME type, bytes), `text` its
        caption; `voice`: a voice note's OGG/Opus bytes, with the length Telegram tells
        (`seconds`, else its real length) and size (`size`, else its real one), sent as
        `spoken_as` ("voice", "audio" or "video_note"); `user` None: a message with no `from` at all;
        `album`: the `media_group_id` of items sent together, one message each."""
        message_id = next(self._message_ids)
        message: dict[str, Any] = {"message_id": message_id, "date": int(time.time()), "chat": chat}
        if user is not None:
            message["from"] = user
        if sender_chat is not None:
            message["sender_chat"] = sender_chat
        attached = bool(photo or sticker or document or voice)
        text_key, entities_key = ("caption", "caption_entities") if attached else ("text", "entities")
        if photo:
            data = photo if isinstance(photo, bytes) else b"not really a photo"
            self.files[f"photo{message_id}"] = data
            message["photo"] = [{"file_id": f"photo{message_id}", "file_unique_id": f"p{message_id}",
                                 "width": 1280, "height": 960, "file_size": len(data)}]
        if document:
            name, mime_type, data = document
            self.files[f"doc{message_id}"] = data
            message["document"] = {"file_id": f"doc{message_id}", "file_unique_id": f"d{message_id}",
                                   "file_name": name, "mime_type": mime_type, "file_size": len(data)}
        if voice is not None:
            self.files[f"voice{message_id}"] = voice
            length = seconds if seconds is not None else max(1, round(seconds_of(voice)))
            message[spoken_as] = {"file_id": f"voice{message_id}", "file_unique_id": f"v{message_id}",
                                  "duration": length, "file_size": size if size is not None else len(voice)}
            if spoken_as == "video_note":
                message[spoken_as]["length"] = 240  # the round video's diameter
            else:
                message[spoken_as]["mime_type"] = "audio/ogg"
        if sticker:
            message["sticker"] = {"file_id": f"sticker{message_id}", "file_unique_id": f"s{message_id}",
                                  "type": "regular", "width": 512, "height": 512, "is_animated": False,
                                  "is_video": False}
        if text or not attached:
            message[text_key] = text
        if entities := _entities(text, command=not attached):
            message[entities_key] = entities
        if album is not None:
            message["media_group_id"] = album
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        if reply_to is not None:
            original = self.message(chat["id"], reply_to)
            sender = self._user_of(original.sender_id)
            message["reply_to_message"] = {"message_id": reply_to, "date": int(time.time()), "chat": chat,
                                           "from": sender, "text": original.text}
        sender = user["id"] if user is not None else (sender_chat or chat)["id"]
        self.chats[chat["id"]].append(ChatMessage(message_id, chat["id"], text, sender,
                                                  thread_id=thread_id, reply_to=reply_to))
        self._sent[chat["id"], message_id] = message
        self._push({"message": message})
        return message_id

    def edit(self, chat: dict, user: dict, message_id: int, text: str) -> None:
        """A person edits their message's text, or its caption; Telegram sends it whole again (what
        came with it too), with its entities."""
        self.message(chat["id"], message_id).text = text
        edited = {key: value for key, value in self._sent[chat["id"], message_id].items()
                  if key not in ("text", "entities", "caption", "caption_entities")}
        attached = any(kind in edited for kind in ("photo", "document", "voice", "audio", "video_note", "sticker"))
        text_key, entities_key = ("caption", "caption_entities") if attached else ("text", "entities")
        edited |= {"edit_date": int(time.time()), "from": user, text_key: text}
        if entities := _entities(text, command=not attached):
            edited[entities_key] = entities
        self._push({"edited_message": edited})

    def press(self, chat: dict, user: dict, message_id: int, data: str) -> None:
        original = self.message(chat["id"], message_id)
        query_id = str(next(self._update_ids) * 7)
        self._pressed_at[query_id] = time.monotonic()
        self._push({"callback_query": {
            "id": query_id, "from": user, "chat_instance": "ci",
            "data": data,
            "message": {"message_id": message_id, "date": int(time.time()), "chat": chat,
                        "from": self._user_of(original.sender_id), "text": original.text},
        }})

    def remove_bot(self, chat: dict, bot_id: int, by: dict) -> None:
        """A person removes a bot from a group: it is no longer a member, and Telegram tells that
        bot alone (a `my_chat_member` update)."""
        self.outside.add((bot_id, chat["id"]))
        other = next((bot for bot in self.other_bots.values() if bot.bot_id == bot_id), None)
        member = {"user": self._user_of(bot_id)}
        update = {"update_id": next(self._update_ids), "my_chat_member": {
            "chat": chat, "from": by, "date": int(time.time()),
            "old_chat_member": member | {"status": "member"}, "new_chat_member": member | {"status": "left"}}}
        updates, arrived = (other.updates, other.new_update) if other else (self._updates, self._new_update)
        updates.append(update)
        arrived.set()

    async def settled(self) -> None:
        """Every update sent so far has been fetched and handled to the end by the applications in
        `polled_by`. Fetched: an update is dropped here once a getUpdates asks past it, which the
        polling transport does only after queueing it; handled: PTB marks a queued update done
        once its handlers have returned (`update_queue.join()`, what Application.stop waits on)."""
        assert self.polled_by, "no application polls this fake"
        await self.wait_for(lambda: not self._updates)
        for application in self.polled_by:
            await asyncio.wait_for(application.update_queue.join(), 30)

    def updates_waiting(self) -> list[dict]:
        """The updates not fetched yet: what Telegram would post to a webhook instead."""
        return list(self._updates)

    async def post_waiting_updates(self, url: str | list[str], secret: str) -> None:
        """POST the updates not fetched yet to a webhook at `url`, one after another, each sent
        once the previous one was acknowledged, the way Telegram calls a webhook. Several
        addresses take them in turn, as processes behind a load balancer."""
        urls = itertools.cycle([url] if isinstance(url, str) else url)
        async with aiohttp.ClientSession() as http:
            while self._updates:
                update = self._updates.pop(0)
                async with http.post(next(urls), json=update,
                                     headers={"X-Telegram-Bot-Api-Secret-Token": secret}) as answer:
                    assert answer.status == 200, await answer.text()

    def message(self, chat_id: int, message_id: int) -> ChatMessage:
        return next(m for m in self.chats[chat_id] if m.message_id == message_id)

    def bot_messages(self, chat_id: int) -> list[ChatMessage]:
        return [m for m in self.chats[chat_id] if m.sender_id == self.bot_id]

    def calls_to(self, method: str) -> list[dict]:
        return [params for name, params in self.calls if name == method]

    async def wait_for(self, condition, timeout: float = 10.0):
        """Wait until condition() returns something truthy, and return it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = condition()
            if found:
                return found
            await asyncio.sleep(0.02)
        raise AssertionError("the fake Telegram never saw what the test waited for")

    # -- serving ---------------------------------------------------------------------------
    def _push(self, update: dict) -> None:
        update = {"update_id": next(self._update_ids), **update}
        heard_by_others = [bot for bot in self.other_bots.values() if bot.hears(update)]
        for bot in heard_by_others:
            bot.updates.append(update)
            bot.new_update.set()
        query = update.get("callback_query")
        if query is None or not heard_by_others:  # a press reaches the bot whose message it is
            self._updates.append(update)
            self._new_update.set()

    def _bot_user(self) -> dict:
        """The bot making the request being answered (the main one, or one of `other_bots`)."""
        other = self._asking.get()
        if other is not None:
            return other.user()
        return {"id": self.bot_id, "is_bot": True, "first_name": "Mira", "username": self.username}

    def _user_of(self, sender_id: int) -> dict:
        if sender_id == self.bot_id:
            return {"id": self.bot_id, "is_bot": True, "first_name": "Mira", "username": self.username}
        other = next((bot for bot in self.other_bots.values() if bot.bot_id == sender_id), None)
        return other.user() if other else {"id": sender_id, "is_bot": False, "first_name": "Someone"}

    @property
    def _my_id(self) -> int:
        return self._bot_user()["id"]

    async def _handle(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        if token != self.token and token not in self.other_bots:
            return web.json_response({"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401)
        self._asking.set(self.other_bots.get(token))  # this request's task only
        method = request.match_info["method"]
        params: dict[str, Any] = {}
        if request.can_read_body:
            form = await request.post()
            for key, value in form.items():
                if hasattr(value, "file"):
                    params[key] = {"filename": value.filename, "data": value.file.read()}
                    continue
                try:
                    params[key] = json.loads(value)
                except (TypeError, json.JSONDecodeError):
                    params[key] = value
        self.calls.append((method, params))
        if self.failures.get(method):
            answer = self.failures[method].pop(0)
            return web.json_response(answer, status=answer["error_code"])
        handler = getattr(self, f"_m_{method}", None)
        result = await handler(params) if handler else True
        if isinstance(result, web.Response):
            return result
        return web.json_response({"ok": True, "result": result})

    @staticmethod
    def _error(status: int, description: str) -> web.Response:
        return web.json_response({"ok": False, "error_code": status, "description": description}, status=status)

    async def _m_answerCallbackQuery(self, params: dict):
        pressed_at = self._pressed_at.pop(str(params.get("callback_query_id")), None)  # answered once
        if pressed_at is None or time.monotonic() - pressed_at > self.presses_kept_s:
            return self._error(400, "Bad Request: query is too old and response timeout expired or query ID is invalid")
        return True

    async def _m_getFile(self, params: dict):
        file_id = str(params.get("file_id"))
        if file_id not in self.files:
            return self._error(400, "Bad Request: invalid file_id")
        return {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": len(self.files[file_id]),
                "file_path": f"files/{file_id}"}

    async def _file(self, request: web.Request) -> web.Response:
        file_id = request.match_info["path"].removeprefix("files/")
        if request.match_info["token"] != self.token or file_id not in self.files:
            return web.Response(status=404)
        return web.Response(body=self.files[file_id])

    async def _m_getMe(self, params: dict) -> dict:
        return {**self._bot_user(), "can_join_groups": self.joins_groups, "can_read_all_group_messages": False,
                "supports_inline_queries": False}

    async def _m_getUpdates(self, params: dict) -> list[dict]:
        """Long polling: the asking bot's updates from `offset` on, waiting a moment for one."""
        other = self._asking.get()
        updates, new_update = (other.updates, other.new_update) if other else (self._updates, self._new_update)
        updates[:] = [u for u in updates if u["update_id"] >= int(params.get("offset", 0) or 0)]
        if not updates:
            new_update.clear()
            try:
                await asyncio.wait_for(new_update.wait(), min(float(params.get("timeout", 0) or 0), 0.5))
            except asyncio.TimeoutError:
                pass
        return list(updates)

    def _checked_text(self, params: dict) -> tuple[str | None, web.Response | None]:
        text = str(params.get("text", ""))
        visible = text
        if params.get("parse_mode") == "HTML":
            error, visible = parse_html(text)
            if error:
                return None, self._error(400, f"Bad Request: can't parse entities: {error}")
        if not visible.strip():
            return None, self._error(400, "Bad Request: message text is empty")
        if len(visible) > MAX_TEXT:
            return None, self._error(400, "Bad Request: message is too long")
        return text, None

    def _message_json(self, m: ChatMessage) -> dict:
        chat = {"id": m.chat_id, "type": "private" if m.chat_id > 0 else "supergroup"}
        out: dict[str, Any] = {"message_id": m.message_id, "date": int(time.time()), "chat": chat,
                               "from": self._bot_user(), "text": m.text}
        if m.reply_markup:
            out["reply_markup"] = m.reply_markup
        if m.thread_id is not None:
            out["message_thread_id"] = m.thread_id
        return out

    async def _m_getChatMember(self, params: dict):
        chat_id, user_id = int(params["chat_id"]), int(params["user_id"])
        status = "left" if (user_id, chat_id) in self.outside else "member"
        return {"status": status, "user": self._user_of(user_id)}

    async def _m_sendMessage(self, params: dict):
        chat_id = int(params["chat_id"])
        if chat_id in self.gone:
            return self._error(400, "Bad Request: chat not found")
        if chat_id in self.migrated:  # as Telegram answers a group that became a supergroup
            return web.json_response({"ok": False, "error_code": 400,
                                      "description": "Bad Request: group chat was upgraded to a supergroup chat",
                                      "parameters": {"migrate_to_chat_id": self.migrated[chat_id]}}, status=400)
        if chat_id > 0 and chat_id in self.blocked_dms:
            return self._error(403, "Forbidden: bot can't initiate conversation with a user")
        if (self._my_id, chat_id) in self.outside:
            return self._error(403, "Forbidden: bot is not a member of the supergroup chat")
        if self.refused is not None and self.refused in str(params.get("text")):
            if self.refusal_held is not None:
                await self.refusal_held.wait()
            return self._error(403, "Forbidden: bot was kicked from the group chat")
        if self.stalled is not None and self.stalled in str(params.get("reply_markup")):
            await asyncio.sleep(3600)  # the sender is killed meanwhile: nothing reaches the chat
        text, error = self._checked_text(params)
        if error:
            return error
        reply = params.get("reply_parameters") or {}
        message = ChatMessage(next(self._message_ids), chat_id, text, self._my_id,
                              parse_mode=params.get("parse_mode"), reply_markup=params.get("reply_markup"),
                              thread_id=params.get("message_thread_id"), reply_to=reply.get("message_id"))
        self.chats[chat_id].append(message)
        return self._message_json(message)

    async def _m_editMessageText(self, params: dict):
        message = self.message(int(params["chat_id"]), int(params["message_id"]))
        text, error = self._checked_text(params)
        if error:
            return error
        markup = params.get("reply_markup")
        if text == message.text and markup == message.reply_markup:
            return self._error(400, "Bad Request: message is not modified: specified new message content "
                                    "and reply markup are exactly the same")
        message.text, message.parse_mode, message.reply_markup = text, params.get("parse_mode"), markup
        message.edits += 1
        return self._message_json(message)

    async def _m_editMessageReplyMarkup(self, params: dict):
        message = self.message(int(params["chat_id"]), int(params["message_id"]))
        message.reply_markup = params.get("reply_markup")
        return self._message_json(message)

    async def _m_deleteMessage(self, params: dict):
        chat = self.chats[int(params["chat_id"])]
        chat[:] = [m for m in chat if m.message_id != int(params["message_id"])]
        return True

    async def _m_sendVoice(self, params: dict):
        upload = params.get("voice")
        audio = upload["data"] if isinstance(upload, dict) else b""
        if not is_ogg_opus(audio):
            return self._error(400, "Bad Request: the voice note is not OGG/Opus")
        chat_id = int(params["chat_id"])
        message = ChatMessage(next(self._message_ids), chat_id, "", self._my_id,
                              thread_id=params.get("message_thread_id"),
                              voice={"data": audio, "duration": params.get("duration"), "ogg_opus": True})
        self.chats[chat_id].append(message)
        return {**self._message_json(message), "voice": {"file_id": "v1", "file_unique_id": "uv1",
                                                         "duration": int(params.get("duration") or 1)}}

    async def _m_sendPhoto(self, params: dict):
        upload = params.get("photo")
        data = upload["data"] if isinstance(upload, dict) else b""
        chat_id = int(params["chat_id"])
        message = ChatMessage(next(self._message_ids), chat_id, str(params.get("caption", "")), self._my_id,
                              thread_id=params.get("message_thread_id"), photo=data)
        self.chats[chat_id].append(message)
        return {**self._message_json(message), "photo": [{"file_id": "p1", "file_unique_id": "up1",
                                                         "width": 256, "height": 256}]}

    async def _m_sendDocument(self, params: dict):
        chat_id = int(params["chat_id"])
        message = ChatMessage(next(self._message_ids), chat_id, str(params.get("caption", "")), self._my_id,
                              document=params.get("document"))
        self.chats[chat_id].append(message)
        return {**self._message_json(message), "document": {"file_id": "f1", "file_unique_id": "u1",
                                                            "file_name": "export.json"}}
