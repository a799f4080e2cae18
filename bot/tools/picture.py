"""`picture` (SPEC 20): the character sends a picture when the talk calls for it, drawn by the
image server the owner runs or pays for — `[pictures] kind` "openai" (`/images/generations`,
`b64_json`) or "automatic1111" (`/sdapi/v1/txt2img`). The model writes the scene; the character's
`appearance` goes before it, so its look stays the same from picture to picture.

- Counted: at most `per_day` pictures a person (in the database, across processes); each counts
  `tokens_each` against their allowance.
- Safe where it must be: unless the character is age-restricted *and* the asker's place is one
  (both), every request carries the backend's safe setting — OpenAI's `moderation: "auto"`,
  automatic1111's negative prompt `safe_negative_prompt`. An age-restricted character draws only
  where it may talk: the gate asks that before any tool runs.
- Bounded: the request goes through the process's one outside client (bot/tools/outside.py):
  TIMEOUT_S for the whole call, the answer's decoded bytes capped at MAX_ANSWER; what comes back
  is read off the event loop with Pillow under the image-bomb guard of SPEC 13 (the header
  first: over 40 million pixels is refused before decoding) and refused past 10 MB or when it is
  not a PNG, JPEG, WebP or GIF; a refusal, a server error or a timeout is one line under the
  reply, and the text stands.
- Our words, stored: what the model reads of it is ours (never the server's), so it is `local`;
  it keeps what the model wrote (the scene, sent as a picture), so it `stores`, and refuses in a
  turn outside text entered.
- Never stored: the picture goes out as a part of the reply (Telegram `sendPhoto`, Discord an
  attachment, the console saves it to a file it names); the reply is stored with
  "[sent a picture: <scene>]" so the character remembers.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import json
import logging
from typing import Any, Awaitable, Callable

from PIL import Image, UnidentifiedImageError

from bot.access.gate import PICTURE
from bot.config import LLMConfig, PicturesConfig, env_secret
from bot.contract import IMAGE_MAX_PIXELS, Part, Picture
from bot.tools.outside import Answered, Limits, Outside, OutsideFailed, TooLarge, TooSlow
from bot.tools.toolbox import Outcome, TurnScope, result

log = logging.getLogger(__name__)
MAX_BYTES = 10 * 1024 * 1024  # a picture larger than this is refused
MAX_ANSWER = MAX_BYTES * 4 // 3 + 64 * 1024  # the server's answer is read up to this: the picture in base64, and JSON
TIMEOUT_S = 120.0  # drawing takes a while
MAX_SCENE = 1_000
FORMATS = ("PNG", "JPEG", "WEBP", "GIF")  # what Telegram's sendPhoto and Discord show as a picture
SIZE = 1024
SPEC = {
    "type": "function",
    "function": {
        "name": "picture",
        "description": "Send the person a picture: describe the scene to draw (who, where, light, mood). "
                       "Your own look is added for you. Only when the talk calls for a picture.",
        "parameters": {"type": "object", "properties": {"scene": {"type": "string"}}, "required": ["scene"]},
    },
}


class NoPicture(Exception):
    """The image server gave no picture; the message says why, in a few words."""


def checked(data: bytes) -> str:
    """The picture's format ("png", "jpeg", …) after the guard of SPEC 13, or NoPicture."""
    if len(data) > MAX_BYTES:
        raise NoPicture(f"it was larger than {MAX_BYTES // (1024 * 1024)} MB")
    try:
        with Image.open(io.BytesIO(data)) as image:  # the header only
            width, height = image.size
            if width * height > IMAGE_MAX_PIXELS:
                raise NoPicture(f"it promised {width:,}×{height:,} pixels, over the limit of {IMAGE_MAX_PIXELS:,}")
            if image.format not in FORMATS:
                raise NoPicture(f"it was not a PNG, JPEG, WebP or GIF picture ({image.format or 'unknown'})")
            image.verify()
            return image.format.lower()
    except (UnidentifiedImageError, OSError, SyntaxError, Image.DecompressionBombError):
        raise NoPicture("what came back was not an image") from None


class ImageServer:
    """The owner's image server, as `[pictures]` names it."""

    def __init__(self, config: PicturesConfig, llm: LLMConfig, outside: Outside):
        self.config = config
        self.base_url = (config.base_url or llm.base_url).rstrip("/")
        self.api_key = env_secret(config.api_key_env) if config.api_key_env else llm.api_key
        self.outside = outside

    def request(self, prompt: str, safe: bool) -> tuple[str, dict[str, Any], dict[str, str]]:
        """Where to ask, what, and with which headers, in the server's own shape."""
        if self.config.kind == "openai":
            body: dict[str, Any] = {"prompt": prompt, "n": 1, "size": f"{SIZE}x{SIZE}",
                                    "response_format": "b64_json", "moderation": "auto" if safe else "low"}
            if self.config.model:
                body["model"] = self.config.model
            return (f"{self.base_url}/images/generations", body, {"Authorization": f"Bearer {self.api_key}"})
        body = {"prompt": prompt, "width": SIZE, "height": SIZE, "steps": 25,
                "negative_prompt": self.config.safe_negative_prompt if safe else ""}
        if self.config.model:
            body["override_settings"] = {"sd_model_checkpoint": self.config.model}
        return f"{self.base_url}/sdapi/v1/txt2img", body, {}

    async def draw(self, prompt: str, safe: bool) -> bytes:
        """The picture's bytes as the server sent them (its answer read up to MAX_ANSWER), or
        NoPicture saying why not."""
        url, body, headers = self.request(prompt, safe)
        try:
            answer = await self.outside.call("POST", url, Limits(TIMEOUT_S, MAX_ANSWER), json=body, headers=headers)
        except TooLarge:
            raise NoPicture(f"it was larger than {MAX_BYTES // (1024 * 1024)} MB") from None
        except TooSlow:
            raise NoPicture("the image server did not answer in time") from None
        except Answered as failure:
            raise NoPicture(f"the image server answered {failure.status}") from None
        except OutsideFailed:
            raise NoPicture("the image server could not be reached") from None
        return await asyncio.to_thread(self.picture_in, answer.body)

    def picture_in(self, answer: bytes) -> bytes:
        """The picture's bytes in the server's JSON answer (read off the event loop: it may be
        14 MB), or NoPicture."""
        try:
            found = json.loads(answer)
            encoded = found["data"][0]["b64_json"] if self.config.kind == "openai" else found["images"][0]
            return base64.b64decode(encoded, validate=True)
        except (ValueError, KeyError, IndexError, TypeError, binascii.Error):
            raise NoPicture("the image server's answer held no picture") from None


class Picturing:
    name, spec, guidance = "picture", SPEC, ""
    local = True  # what the model reads of it is ours; the picture never reaches the model
    stores = True  # the scene the model wrote is drawn and sent: refused once outside text entered
    asks = PICTURE  # the gate lets each call in with one of the day's pictures, or says why not (SPEC 20)
    mark = "🖼️"  # a refusal is named under the reply

    def __init__(self, server: ImageServer, appearances: dict[str, str],
                 give_back: Callable[[int, int], Awaitable[None]], age_restricted: frozenset[str] = frozenset()):
        self.server = server
        self.appearances = {name.casefold(): text for name, text in appearances.items()}
        self.give_back = give_back  # (person, character): a picture the gate let in, never drawn
        self.age_restricted = frozenset(name.casefold() for name in age_restricted)  # characters (SPEC 17)

    def offered(self, scope: TurnScope) -> bool:
        return scope.person_id is not None

    async def run(self, scope: TurnScope, arguments: dict[str, Any]) -> str | Outcome:
        assert scope.person_id is not None  # offered to a person only
        scene = arguments.get("scene")
        if not isinstance(scene, str) or not scene.strip():
            await self.give_back(scope.person_id, scope.character_id)
            return result(error="scene must describe what to draw")
        scene = " ".join(scene.split())[:MAX_SCENE]
        appearance = self.appearances.get(scope.character_name.casefold())
        prompt = f"{scope.character_name}, {appearance}. {scene}" if appearance else scene
        safe = not (scope.character_name.casefold() in self.age_restricted
                    and scope.asker is not None and scope.asker.age_restricted)
        try:
            data = await self.server.draw(prompt, safe)
            kind = await asyncio.to_thread(checked, data)
        except NoPicture as why:
            log.warning("a picture could not be made: %s", why)
            await self.give_back(scope.person_id, scope.character_id)
            return Outcome(result(error=f"no picture: {why}; say so briefly, do not describe one as sent"),
                           shown=f"🖼️ no picture: {why}")
        scope.journal.parts.append(Part("a picture", Picture, made=_ready(Picture(data, f"picture.{kind}", scene))))
        scope.journal.remembered.append(f"[sent a picture: {scene}]")
        return Outcome(result(sent=True, scene=scene), shown="")


def _ready(picture: Picture):
    async def made(waveform: bool) -> Picture:
        return picture
    return made
