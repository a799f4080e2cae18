"""A loopback fake of Discord for a real `discord.Client`: the gateway and the REST API.

Point discord.py at it with `discord.http.Route.BASE` and
`discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY` (the `patched` context manager does both).
The gateway speaks HELLO → IDENTIFY → READY → GUILD_CREATE in plain-text JSON frames, answers
heartbeats, and lets a test dispatch MESSAGE_CREATE / MESSAGE_UPDATE / MESSAGE_DELETE /
INTERACTION_CREATE. REST covers messages, edits, typing, interaction callbacks and webhook
follow-ups, channel webhooks (made by the bot, executed under any name: SPEC 15's voices), and
records every payload (content, components, flags, allowed_mentions) so a test
can see exactly what each person was shown. Bodies are JSON with a Content-Type of exactly
`application/json`, which discord.py requires.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import discord
import yarl
from aiohttp import web

from tests.audio import is_ogg_opus, seconds_of

EPHEMERAL = 64
VOICE_MESSAGE = 8192  # the message flag of a voice message
_snowflakes = itertools.count(1_100_000_000_000_000_000)


MANAGE_WEBHOOKS = 1 << 29  # a permission bit, as Discord numbers them

def snowflake() -> str:
    return str(next(_snowflakes))


def now() -> str:
    return datetime.now(timezone.utc).isoformat()


@dataclass
class Sent:
    """A message as people see it (edits applied)."""

    id: str
    channel_id: str
    content: str
    author_id: str
    components: list = field(default_factory=list)
    flags: int = 0
    allowed_mentions: dict | None = None
    attachments: list = field(default_factory=list)
    interaction_token: str | None = None
    edits: int = 0
    described: list = field(default_factory=list)  # the body's `attachments`: each file's id, name, length, waveform
    username: str = ""  # a webhook message's name (its character's)
    webhook_id: str | None = None

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & EPHEMERAL)

    @property
    def voice_message(self) -> bool:
        return bool(self.flags & VOICE_MESSAGE)

    def buttons(self) -> list[dict]:
        return [c for row in self.components for c in row.get("components", []) if c.get("type") == 2]


class FakeDiscord:
    def __init__(self) -> None:
        self.app_id = snowflake()
        self.bot = {"id": self.app_id, "username": "Mira", "discriminator": "0", "global_name": "Mira",
                    "avatar": None, "bot": True}
        self.guild_id = snowflake()
        self.channel_id = snowflake()  # a channel people must mention the bot in
        self.always_on_id = snowflake()  # a channel configured always-on
        self.age_restricted_id = snowflake()  # a channel marked age-restricted (NSFW), for SPEC 17
        self.role_id = snowflake()  # a role of the guild ("Regulars"), given with say(..., roles=…)
        self.member_roles: dict[str, tuple[str, ...]] = {}  # user id → roles, for GET guilds/…/members/…
        self.files: dict[str, bytes] = {}  # attachment id → bytes, served at the attachment's URL
        self.fetched: list[str] = []  # the attachment ids fetched, in order
        self.messages: list[Sent] = []
        self.requests: list[tuple[str, str, Any]] = []
        self.callbacks: list[dict] = []
        self.commands: list[dict] = []
        self.command_syncs = 0  # how many times the bot replaced its slash commands
        self.identified = asyncio.Event()
        self.identifies: list[dict] = []  # every IDENTIFY payload (with its shard, when sharded)
        self.dm_channels: set[str] = set()
        self.closed_dms: set[str] = set()  # DM channels whose person cannot be written to (50007)
        self.interactions: list[dict] = []  # every interaction dispatched, by token
        self.webhooks: dict[str, dict] = {}  # channel webhooks by id, as Discord returns them
        self.avatars: dict[str, bytes] = {}  # webhook id → the avatar image it was made with
        self.no_manage_webhooks: set[str] = set()  # channels whose overwrites deny the bot Manage Webhooks
        self.no_voice_messages: set[str] = set()  # channels where voice messages are refused (50173)
        self._sockets: list[web.WebSocketResponse] = []
        self._seq = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.base = ""

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        app.router.add_get("/attachments/{id}/{filename}", self._attachment)
        self._runner = web.AppRunner(app, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        for ws in self._sockets:
            await ws.close()
        if self._runner:
            await self._runner.cleanup()

    @contextlib.contextmanager
    def patched(self):
        """Point discord.py's REST base and gateway address at this fake."""
        old_base, old_gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
        discord.http.Route.BASE = f"{self.base}/api/v10"
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(f"{self.base.replace('http', 'ws')}/gateway")
        try:
            yield
        finally:
            discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = old_base, old_gateway

    # -- people and payloads -------------------------------------------------------------------
    @staticmethod
    def user(user_id: str, name: str) -> dict:
        return {"id": user_id, "username": name.lower(), "discriminator": "0", "global_name": name,
                "avatar": None, "bot": False}

    def member(self, user: dict, roles: tuple[str, ...] = ()) -> dict:
        return {"user": user, "roles": list(roles), "joined_at": now(), "deaf": False, "mute": False, "flags": 0,
                "nick": None, "permissions": "2251799813685247"}

    def _channel(self, channel_id: str, name: str) -> dict:
        overwrites = [{"id": self.app_id, "type": 1, "allow": "0", "deny": str(MANAGE_WEBHOOKS)}] \
            if channel_id in self.no_manage_webhooks else []
        return {"id": channel_id, "type": 0, "name": name, "position": 0, "guild_id": self.guild_id,
                "permission_overwrites": overwrites, "parent_id": None, "nsfw": channel_id == self.age_restricted_id,
                "topic": None}

    def _guild(self) -> dict:
        return {
            "id": self.guild_id, "name": "Harbour", "icon": None, "owner_id": snowflake(),
            # everything but Administrator (which would override a channel's overwrites)
            "roles": [{"id": self.guild_id, "name": "@everyone", "permissions": str((1 << 51) - 1 & ~(1 << 3)),
                       "position": 0, "color": 0, "hoist": False, "managed": False, "mentionable": False,
                       "flags": 0},
                      {"id": self.role_id, "name": "Regulars", "permissions": "0", "position": 1, "color": 0,
                       "hoist": False, "managed": False, "mentionable": False, "flags": 0}],
            "channels": [self._channel(self.channel_id, "tavern"), self._channel(self.always_on_id, "lounge"),
                         self._channel(self.age_restricted_id, "after-dark")],
            "threads": [], "members": [self.member(self.bot)], "member_count": 3, "large": False,
            "unavailable": False, "features": [], "emojis": [], "stickers": [], "stage_instances": [],
            "guild_scheduled_events": [], "soundboard_sounds": [], "voice_states": [], "presences": [],
            "verification_level": 0, "default_message_notifications": 0, "explicit_content_filter": 0,
            "mfa_level": 0, "premium_tier": 0, "preferred_locale": "en-US", "system_channel_flags": 0,
            "nsfw_level": 0, "premium_progress_bar_enabled": False, "joined_at": now(),
        }

    def thread(self, parent_id: str, name: str = "side quest") -> dict:
        thread = {"id": snowflake(), "type": 11, "name": name, "guild_id": self.guild_id, "parent_id": parent_id,
                  "owner_id": self.app_id, "message_count": 0, "member_count": 1, "rate_limit_per_user": 0,
                  "thread_metadata": {"archived": False, "auto_archive_duration": 1440, "archive_timestamp": now(),
                                      "locked": False}}
        return thread

    def message_payload(self, channel_id: str, author: dict, content: str, *, guild: bool = True,
                        message_id: str | None = None, reference: dict | None = None,
                        mentions: list[dict] | None = None, roles: tuple[str, ...] = (),
                        attachments: tuple[tuple[str, str, bytes], ...] = (), voice: bytes | None = None,
                        seconds: float | None = None, stickers: tuple[str, ...] = ()) -> dict:
        payload: dict[str, Any] = {
            "id": message_id or snowflake(), "channel_id": channel_id, "author": author, "content": content,
            "timestamp": now(), "edited_timestamp": None, "tts": False, "mention_everyone": False,
            "mentions": mentions or [], "mention_roles": [], "attachments": [self._attached(*a) for a in attachments],
            "embeds": [], "pinned": False,
            "type": 19 if reference else 0, "flags": 0, "components": [],
            "sticker_items": [{"id": snowflake(), "name": name, "format_type": 1} for name in stickers],
        }
        if voice is not None:  # a voice message: one audio/ogg attachment with its length and waveform
            attached = self._attached("voice-message.ogg", "audio/ogg", voice)
            attached |= {"duration_secs": seconds if seconds is not None else seconds_of(voice),
                         "waveform": base64.b64encode(bytes(range(0, 256, 4))).decode()}
            payload["attachments"], payload["flags"] = [attached], VOICE_MESSAGE
        if guild:
            payload["guild_id"] = self.guild_id
            payload["member"] = {k: v for k, v in self.member(author, roles).items() if k != "user"}
        if reference:
            payload["message_reference"] = {"message_id": reference["id"], "channel_id": channel_id,
                                             **({"guild_id": self.guild_id} if guild else {})}
            payload["referenced_message"] = reference
        return payload

    # -- what tests do ---------------------------------------------------------------------
    async def dispatch(self, event: str, data: dict) -> None:
        for ws in self._sockets:
            await ws.send_str(json.dumps({"op": 0, "t": event, "s": next(self._seq), "d": data}))

    def _attached(self, filename: str, content_type: str, data: bytes) -> dict:
        attachment_id = snowflake()
        self.files[attachment_id] = data
        url = f"{self.base}/attachments/{attachment_id}/{filename}"
        return {"id": attachment_id, "filename": filename, "size": len(data), "url": url, "proxy_url": url,
                "content_type": content_type}

    async def say(self, channel_id: str, author: dict, content: str, *, guild: bool = True,
                  reply_to: Sent | None = None, mention_bot: bool = False, roles: tuple[str, ...] = (),
                  attachments: tuple[tuple[str, str, bytes], ...] = (), voice: bytes | None = None,
                  seconds: float | None = None, stickers: tuple[str, ...] = ()) -> dict:
        """A person posts a message (with `roles` in the guild; `attachments` as (file name, MIME
        type, bytes); `voice`: a voice message's OGG/Opus, of `seconds` as Discord tells it, else
        its real length; `stickers` by name); returns its payload."""
        reference = None
        if reply_to is not None:
            reference = self._payload_of(reply_to)
        if mention_bot:
            content = f"<@{self.app_id}> {content}"
        payload = self.message_payload(channel_id, author, content, guild=guild, reference=reference,
                                       mentions=[self.bot] if mention_bot else [], roles=roles,
                                       attachments=attachments, voice=voice, seconds=seconds, stickers=stickers)
        if not guild:
            self.dm_channels.add(channel_id)
        await self.dispatch("MESSAGE_CREATE", payload)
        return payload

    async def edit(self, original: dict, content: str) -> None:
        await self.dispatch("MESSAGE_UPDATE", {**original, "content": content, "edited_timestamp": now()})

    async def delete(self, original: dict) -> None:
        data = {"id": original["id"], "channel_id": original["channel_id"]}
        if "guild_id" in original:
            data["guild_id"] = original["guild_id"]
        await self.dispatch("MESSAGE_DELETE", data)

    async def delete_many(self, *originals: dict) -> None:
        """A moderator deletes several messages of one channel at once (a purge, a ban's)."""
        data = {"ids": [m["id"] for m in originals], "channel_id": originals[0]["channel_id"]}
        if "guild_id" in originals[0]:
            data["guild_id"] = originals[0]["guild_id"]
        await self.dispatch("MESSAGE_DELETE_BULK", data)

    def _interaction(self, kind: int, user: dict, channel_id: str, data: dict, *, guild: bool = True,
                     message: dict | None = None) -> dict:
        payload: dict[str, Any] = {
            "id": snowflake(), "application_id": self.app_id, "type": kind, "token": f"tok-{snowflake()}",
            "version": 1, "data": data, "channel_id": channel_id, "locale": "en-US", "entitlements": [],
            "app_permissions": "2251799813685247", "attachment_size_limit": 8_388_608,
            "authorizing_integration_owners": {"0": self.guild_id} if guild else {"1": user["id"]},
            "context": 0 if guild else 1,
        }
        if guild:
            payload["guild_id"] = self.guild_id
            payload["channel"] = self._channel(channel_id, "tavern")
            payload["member"] = self.member(user)
        else:
            payload["channel"] = {"id": channel_id, "type": 1, "recipients": [user]}
            payload["user"] = user
        if message is not None:
            payload["message"] = message
        if not guild:
            self.dm_channels.add(channel_id)
        self.interactions.append({"token": payload["token"], "channel_id": channel_id,
                                  "message_id": (message or {}).get("id")})
        return payload

    async def slash(self, user: dict, channel_id: str, name: str, sub: str | None = None,
                    guild: bool = True, **options: Any) -> dict:
        """A person runs `/name sub option:value …`; returns the interaction payload."""
        kinds = {str: 3, int: 4, bool: 5}
        values = [{"name": k, "type": kinds[type(v)], "value": v} for k, v in options.items()]
        command_options = [{"name": sub, "type": 1, "options": values}] if sub else values
        data = {"id": self._command_id(name), "name": name, "type": 1, "options": command_options}
        payload = self._interaction(2, user, channel_id, data, guild=guild)
        await self.dispatch("INTERACTION_CREATE", payload)
        return payload

    async def context_menu(self, user: dict, target: dict, name: str = "Remember this",
                           guild: bool = True) -> dict:
        data = {"id": self._command_id(name), "name": name, "type": 3, "target_id": target["id"],
                "resolved": {"messages": {target["id"]: target}}}
        payload = self._interaction(2, user, target["channel_id"], data, guild=guild)
        await self.dispatch("INTERACTION_CREATE", payload)
        return payload

    async def click(self, user: dict, message: Sent, label: str, guild: bool = True) -> dict:
        button = next(b for b in message.buttons() if b["label"] == label)
        as_payload = self._payload_of(message)  # its author: the bot, or the webhook that posted it
        payload = self._interaction(3, user, message.channel_id,
                                    {"custom_id": button["custom_id"], "component_type": 2},
                                    guild=guild, message=as_payload)
        await self.dispatch("INTERACTION_CREATE", payload)
        return payload

    async def submit_modal(self, user: dict, modal: dict, value: str, channel_id: str, guild: bool = True) -> None:
        inputs = [c for row in modal["components"] for c in self._flatten(row) if c.get("type") == 4]
        rows = [{"type": 1, "components": [{"type": 4, "custom_id": i["custom_id"], "value": value}]}
                for i in inputs]
        payload = self._interaction(5, user, channel_id, {"custom_id": modal["custom_id"], "components": rows},
                                    guild=guild)
        await self.dispatch("INTERACTION_CREATE", payload)

    @staticmethod
    def _flatten(component: dict) -> list[dict]:
        inner = component.get("components") or ([component["component"]] if "component" in component else [])
        return [component] + [c for child in inner for c in FakeDiscord._flatten(child)]

    def _command_id(self, name: str) -> str:
        return next((c["id"] for c in self.commands if c["name"] == name), snowflake())

    def in_channel(self, channel_id: str) -> list[Sent]:
        return [m for m in self.messages if m.channel_id == channel_id]

    def for_interaction(self, interaction: dict) -> list[Sent]:
        return [m for m in self.messages if m.interaction_token == interaction["token"]]

    async def wait_for(self, condition, timeout: float = 10.0):
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            found = condition()
            if found:
                return found
            await asyncio.sleep(0.02)
        raise AssertionError("the fake Discord never saw what the test waited for")

    # -- gateway ---------------------------------------------------------------------------
    async def _attachment(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["id"])
        self.fetched.append(request.match_info["id"])
        return web.Response(body=data) if data is not None else web.Response(status=404)

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._sockets.append(ws)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41_250}}))
        async for frame in ws:
            message = json.loads(frame.data)
            if message["op"] == 1:
                await ws.send_str(json.dumps({"op": 11}))
            elif message["op"] == 2:
                self.identifies.append(message["d"])
                ready = {"v": 10, "user": self.bot, "guilds": [{"id": self.guild_id, "unavailable": True}],
                         "session_id": "session", "resume_gateway_url": f"{self.base.replace('http', 'ws')}/gateway",
                         "application": {"id": self.app_id, "flags": 0}, "private_channels": [],
                         "relationships": []}
                if "shard" in message["d"]:  # a sharded client: READY names the shard, as Discord's does
                    ready["shard"] = message["d"]["shard"]
                await ws.send_str(json.dumps({"op": 0, "t": "READY", "s": next(self._seq), "d": ready}))
                await ws.send_str(json.dumps({"op": 0, "t": "GUILD_CREATE", "s": next(self._seq),
                                              "d": self._guild()}))
                self.identified.set()
        self._sockets.remove(ws)
        return ws

    # -- REST ------------------------------------------------------------------------------
    @staticmethod
    def _json(data: Any, status: int = 200) -> web.Response:
        if data is None:
            return web.Response(status=204)
        return web.Response(status=status, body=json.dumps(data).encode(), headers={"Content-Type": "application/json"})

    async def _body(self, request: web.Request) -> tuple[dict, list]:
        if not request.can_read_body:
            return {}, []
        if request.content_type.startswith("multipart/"):
            payload: dict = {}
            files = []
            async for part in await request.multipart():
                if part.name == "payload_json":
                    payload = json.loads(await part.text())
                else:
                    files.append({"filename": part.filename, "data": await part.read()})
            return payload, files
        return await request.json(), []

    def _store(self, channel_id: str, body: dict, files: list, author: str, token: str | None = None) -> Sent:
        sent = Sent(snowflake(), channel_id, body.get("content") or "", author, body.get("components") or [],
                    body.get("flags") or 0, body.get("allowed_mentions"), files, token,
                    described=body.get("attachments") or [])
        self.messages.append(sent)
        return sent

    def _voice_refused(self, channel_id: str, body: dict, files: list) -> web.Response | None:
        """What Discord asks of a voice message: no text, one Ogg/Opus file described with its
        length and waveform."""
        if channel_id in self.no_voice_messages:
            return self._json({"message": "Cannot send voice messages in this channel", "code": 50173}, status=403)
        described = body.get("attachments") or []
        if body.get("content") or len(files) != 1 or len(described) != 1 or not is_ogg_opus(files[0]["data"]) \
                or not isinstance(described[0].get("duration_secs"), (int, float)) \
                or not base64.b64decode(described[0].get("waveform") or ""):
            return self._json({"message": "Invalid Form Body: voice message", "code": 50035}, status=400)
        return None

    def author_of(self, sent: Sent) -> dict:
        if sent.webhook_id is None:
            return self.bot
        return {"id": sent.webhook_id, "username": sent.username, "discriminator": "0000", "avatar": None,
                "bot": True}

    def _payload_of(self, sent: Sent) -> dict:
        payload = self.message_payload(sent.channel_id, self.author_of(sent), sent.content,
                                       guild=sent.channel_id not in self.dm_channels, message_id=sent.id)
        payload["components"] = sent.components
        payload["flags"] = sent.flags
        if sent.webhook_id is not None:
            payload["webhook_id"] = sent.webhook_id
            payload.pop("member", None)
        return payload

    def _find(self, message_id: str) -> Sent:
        return next(m for m in self.messages if m.id == message_id)

    def _apply_edit(self, sent: Sent, body: dict) -> None:
        if "content" in body:
            sent.content = body["content"] or ""
        if "components" in body:
            sent.components = body["components"] or []
        if "allowed_mentions" in body:
            sent.allowed_mentions = body["allowed_mentions"]
        sent.edits += 1

    async def _rest(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        body, files = await self._body(request)
        self.requests.append((request.method, path, body))
        parts = path.split("/")
        method = request.method

        if path == "users/@me" and method == "GET":
            return self._json(self.bot)
        if path == "oauth2/applications/@me" and method == "GET":
            return self._json({"id": self.app_id, "name": "Mira", "icon": None, "description": "",
                               "bot_public": True, "bot_require_code_grant": False, "verify_key": "0" * 64,
                               "owner": self.user(snowflake(), "Owner"), "flags": 0, "rpc_origins": []})
        if parts[0] == "applications" and parts[-1] == "commands" and method == "PUT":
            defaults = {"description": "", "options": [], "default_member_permissions": None, "nsfw": False}
            self.command_syncs += 1
            self.commands = [{**defaults, **c, "id": snowflake(), "application_id": self.app_id,
                              "version": snowflake()} for c in body]
            return self._json(self.commands)
        if parts[0] == "users" and len(parts) == 2 and parts[1] != "@me" and method == "GET":
            return self._json(self.user(parts[1], "someone"))
        if parts[0] == "users" and path.endswith("channels") and method == "POST":
            channel_id = snowflake()
            self.dm_channels.add(channel_id)
            return self._json({"id": channel_id, "type": 1, "recipients": [self.user(body["recipient_id"], "x")]})
        if parts[0] == "channels":
            channel_id = parts[1]
            if parts[2:] == ["typing"]:
                return self._json(None)
            if parts[2:] == ["webhooks"] and method == "GET":
                return self._json([hook for hook in self.webhooks.values() if hook["channel_id"] == channel_id])
            if parts[2:] == ["webhooks"] and channel_id in self.no_manage_webhooks:
                return self._json({"message": "Missing Permissions", "code": 50013}, status=403)
            if parts[2:] == ["webhooks"] and method == "POST":
                hook = {"id": snowflake(), "type": 1, "token": f"hook-{snowflake()}", "channel_id": channel_id,
                        "guild_id": self.guild_id, "application_id": self.app_id, "name": body["name"],
                        "avatar": "a1b2c3" if body.get("avatar") else None, "user": self.bot}
                self.webhooks[hook["id"]] = hook
                if body.get("avatar"):
                    self.avatars[hook["id"]] = base64.b64decode(body["avatar"].split(",", 1)[1])
                return self._json(hook)
            if parts[2:] == ["messages"] and method == "POST" and channel_id in self.closed_dms:
                return self._json({"message": "Cannot send messages to this user", "code": 50007}, status=403)
            if parts[2:] == ["messages"] and method == "POST":
                refused = self._voice_refused(channel_id, body, files) if (body.get("flags") or 0) & VOICE_MESSAGE \
                    else None
                if refused is not None:
                    return refused
                return self._json(self._payload_of(self._store(channel_id, body, files, self.app_id)))
            if len(parts) == 4 and parts[2] == "messages":
                if method == "PATCH":
                    sent = self._find(parts[3])
                    if sent.webhook_id is not None:  # only its webhook may edit a webhook's message
                        return self._json({"message": "Cannot edit a message authored by another user",
                                           "code": 50005}, status=403)
                    self._apply_edit(sent, body)
                    return self._json(self._payload_of(sent))
                if method == "DELETE":
                    self.messages = [m for m in self.messages if m.id != parts[3]]
                    return self._json(None)
        if parts[0] == "guilds" and len(parts) == 4 and parts[2] == "members" and method == "GET":
            if parts[3] not in self.member_roles:
                return self._json({"message": "Unknown Member", "code": 10007}, status=404)
            return self._json(self.member(self.user(parts[3], "member"), self.member_roles[parts[3]]))
        if parts[0] == "interactions" and parts[-1] == "callback":
            return self._json(self._callback(parts[1], parts[2], body, files))
        if parts[0] == "webhooks" and parts[1] in self.webhooks:  # a channel webhook: a character's voice
            hook = self.webhooks[parts[1]]
            if parts[2] != hook["token"]:
                return self._json({"message": "Invalid Webhook Token", "code": 50027}, status=401)
            if len(parts) == 3 and method == "POST":
                sent = self._store(hook["channel_id"], body, files, parts[1])
                sent.username, sent.webhook_id = body.get("username") or hook["name"], parts[1]
                return self._json(self._payload_of(sent))
            if len(parts) == 5 and parts[3] == "messages":
                sent = self._find(parts[4])
                if sent.webhook_id != parts[1]:  # a webhook reaches only its own messages
                    return self._json({"message": "Unknown Message", "code": 10008}, status=404)
                if method == "GET":
                    return self._json(self._payload_of(sent))
                if method == "PATCH":
                    self._apply_edit(sent, body)
                    return self._json(self._payload_of(sent))
                if method == "DELETE":
                    self.messages.remove(sent)
                    return self._json(None)
        if parts[0] == "webhooks" and parts[1] != self.app_id:  # a channel webhook someone deleted
            return self._json({"message": "Unknown Webhook", "code": 10015}, status=404)
        if parts[0] == "webhooks":
            token = parts[2]
            if len(parts) == 3 and method == "POST":
                sent = self._store(self._interaction_channel(token), body, files, self.app_id, token)
                return self._json(self._payload_of(sent))
            if len(parts) == 5 and parts[3] == "messages":
                original = self._original(token) if parts[4] == "@original" else self._find(parts[4])
                if method == "PATCH":
                    self._apply_edit(original, body)
                    return self._json(self._payload_of(original))
                if method == "GET":
                    return self._json(self._payload_of(original))
                if method == "DELETE":
                    self.messages.remove(original)
                    return self._json(None)
        return self._json({"message": f"fake Discord has no {method} {path}", "code": 0}, status=404)

    def _interaction_channel(self, token: str) -> str:
        return next(c["channel_id"] for c in self.callbacks if c["token"] == token)

    def _original(self, token: str) -> Sent:
        return next(m for m in self.messages if m.interaction_token == token)

    def _callback(self, interaction_id: str, token: str, body: dict, files: list) -> dict:
        kind = body["type"]
        data = body.get("data") or {}
        channel = next((p["channel_id"] for p in self.interactions if p["token"] == token), "0")
        self.callbacks.append({"id": interaction_id, "token": token, "type": kind, "data": data,
                               "channel_id": channel})
        resource: dict[str, Any] = {"type": kind}
        response: dict[str, Any] = {"id": interaction_id, "type": 2}
        if kind == 4:  # a message in answer
            sent = self._store(channel, data, files, self.app_id, token)
            resource["message"] = self._payload_of(sent)
            response.update(response_message_id=sent.id, response_message_ephemeral=sent.ephemeral)
        elif kind == 5:  # deferred: "thinking…"
            flags = data.get("flags") or 0
            sent = self._store(channel, {"content": "", "flags": flags}, [], self.app_id, token)
            response.update(response_message_id=sent.id, response_message_loading=True,
                            response_message_ephemeral=bool(flags & EPHEMERAL))
        elif kind == 7:  # update the message the component is on
            source = next(p for p in self.interactions if p["token"] == token)["message_id"]
            sent = self._find(source)
            self._apply_edit(sent, data)
            resource["message"] = self._payload_of(sent)
        return {"interaction": response, "resource": resource}
