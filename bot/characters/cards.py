"""Characters: a persona text or a Character Card V2 file (SPEC section 2).

A card is `.json` (V1, V2 or V3; a UTF-8 byte-order mark is fine), a `.png` whose `ccv3`
(preferred) or else `chara` text chunk (`tEXt`, `zTXt` or `iTXt`) holds base64 JSON, or a CCv3
`.charx` (a zip holding `card.json`). A bad card is one line naming the file and the problem.
Fields used: name, description, personality, scenario, first_mes, mes_example,
system_prompt, post_history_instructions, alternate_greetings, the lorebook (`character_book`:
bot/characters/lorebook.py) and SillyTavern's Character's Note (`extensions.depth_prompt`).
Its text is filled in where it is used (`{{char}}`, `{{user}}` and the other macros:
bot/characters/macros.py); `creator_notes` are never read into a prompt.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bot.characters.lorebook import DEFAULT_DEPTH, Lorebook, LorebookError, depth_of, read_lorebook, role_of
from bot.characters.macros import filled
from bot.config import CharacterConfig, ConfigError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CARD_CHUNKS = ("ccv3", "chara")  # the PNG text chunks that hold a card, preferred first
MAX_DECOMPRESSED_BYTES = 16 * 1024 * 1024  # a card's compressed data is read up to this (SPEC 9)
CARD_FIELDS = (
    "nickname",  # V3: what {{char}} becomes, when the card gives one
    "description",
    "personality",
    "scenario",
    "first_mes",
    "mes_example",
    "system_prompt",
    "post_history_instructions",
)
MAX_PORTRAIT_BYTES = 8 * 1024 * 1024  # Discord takes avatars up to this size
TALKATIVENESS = 0.5  # SillyTavern's default for a card's extensions.talkativeness
# In a card's notes among the messages, {{original}} stands for the app's own (SillyTavern's global
# post-history instructions): Keepsake has none, so it stands for nothing
_ORIGINAL = re.compile(r"\{\{\s*original\s*\}\}", re.IGNORECASE)


@dataclass(frozen=True)
class Character:
    name: str
    nickname: str = ""
    description: str = ""
    personality: str = ""
    scenario: str = ""
    first_mes: str = ""
    mes_example: str = ""
    system_prompt: str = ""
    post_history_instructions: str = ""
    depth_prompt: str = ""  # SillyTavern's Character's Note: among the newest messages, `depth_prompt_depth` back
    depth_prompt_depth: int = DEFAULT_DEPTH
    depth_prompt_role: str = "system"  # whose words it is given as (lorebook.ROLES)
    alternate_greetings: tuple[str, ...] = ()
    lorebook: Lorebook = Lorebook()
    talkativeness: float = TALKATIVENESS  # how readily it speaks up in a scene (SPEC 15)
    portrait: bytes | None = field(default=None, repr=False)  # a PNG card's image: its avatar where one is shown
    nsfw: bool = False  # age-restricted (SPEC 17): the config's `nsfw`, else the card's tags
    omniscient: bool = False  # a narrator: in a scene it witnesses everything (SPEC 22)

    def fill(self, text: str, user: str, when: datetime | None = None) -> str:
        """The card's `text` as it is used (bot/characters/macros.py): {{char}} is the card's
        nickname, else the name, {{user}} the speaker's display name, {{random:…}} one of its
        choices, an author's {{// note}} nothing, {{time}} the time `when` (where the person is)."""
        return filled(text, self.nickname or self.name, user, when)

    @property
    def greetings(self) -> int:
        """How many greetings the character has: first_mes, then the card's alternate ones."""
        return 1 + len(self.alternate_greetings)

    def greeting(self, user: str, number: int = 1, when: datetime | None = None) -> str:
        """Greeting `number` (1: first_mes; 2 on: the alternate greetings, in the card's order)."""
        if number > 1:
            return self.fill(self.alternate_greetings[number - 2], user, when)
        return self.fill(self.first_mes, user, when) if self.first_mes else f"Hi {user}, I'm {self.name}."


def load_character(config: CharacterConfig) -> Character:
    """Build the character from its config; a malformed card raises ConfigError."""
    if config.persona is not None:
        return Character(name=config.name, description=config.persona, nsfw=bool(config.nsfw),
                         omniscient=config.omniscient)
    assert config.card is not None
    data = read_card(config.card)
    fields = {key: _text_field(data, key, config.card) for key in CARD_FIELDS}
    fields["alternate_greetings"] = _alternate_greetings(data, config.card)
    fields["talkativeness"] = _talkativeness(data)
    fields["depth_prompt"], fields["depth_prompt_depth"], fields["depth_prompt_role"] = _depth_prompt(data)
    fields["post_history_instructions"] = _ORIGINAL.sub("", fields["post_history_instructions"]).strip()
    fields["portrait"] = _portrait(config.card)
    try:
        fields["lorebook"] = read_lorebook(data.get("character_book"), card=str(config.card),
                                           char=fields["nickname"] or config.name)
    except LorebookError as problem:
        raise ConfigError(f"character card {config.card}: {problem}") from None
    fields["nsfw"] = config.nsfw if config.nsfw is not None else _tagged_nsfw(data)
    # The config's name is what people and /commands use; the card's name is the fallback.
    return Character(name=config.name, omniscient=config.omniscient, **fields)


def _tagged_nsfw(data: dict) -> bool:
    """Whether the card's `tags` include "nsfw" (any case)."""
    tags = data.get("tags")
    return isinstance(tags, list) and any(isinstance(tag, str) and tag.strip().casefold() == "nsfw" for tag in tags)


def read_card(path: Path) -> dict:
    """The `data` object of a Character Card V2 (or a V1 card's top-level object)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"character card {path}: cannot be read ({exc.strerror})") from None
    if path.suffix.lower() == ".png" or raw.startswith(PNG_SIGNATURE):
        text = _card_json_from_png(raw, path)
    elif path.suffix.lower() == ".charx" or raw.startswith(b"PK\x03\x04"):
        text = _card_json_from_charx(raw, path)
    else:
        text = raw.decode("utf-8-sig", errors="replace")  # a byte-order mark is no part of the JSON
    try:
        card = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"character card {path}: not valid JSON ({exc.msg} at line {exc.lineno}, "
                          f"column {exc.colno})") from None
    if not isinstance(card, dict):
        raise ConfigError(f"character card {path}: expected a JSON object")
    spec = card.get("spec")
    data = card.get("data", card) if isinstance(spec, str) and spec.startswith("chara_card_v") else card
    if not isinstance(data, dict):
        raise ConfigError(f"character card {path}: its 'data' is not an object")
    return data


def _portrait(path: Path) -> bytes | None:
    """A PNG card is the character's picture too (a card too big for an avatar has none)."""
    raw = path.read_bytes()
    return raw if raw.startswith(PNG_SIGNATURE) and len(raw) <= MAX_PORTRAIT_BYTES else None


def _talkativeness(data: dict) -> float:
    """`extensions.talkativeness`, 0 to 1: SillyTavern writes it as text ("0.5"); a card
    without it, or with something else there, speaks up at the default."""
    extensions = data.get("extensions")
    value = extensions.get("talkativeness") if isinstance(extensions, dict) else None
    try:
        number = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else None
    except ValueError:
        number = None
    return min(max(number, 0.0), 1.0) if number is not None and math.isfinite(number) else TALKATIVENESS


def _depth_prompt(data: dict) -> tuple[str, int, str]:
    """`extensions.depth_prompt` (SillyTavern's Character's Note): its text, how many of the
    newest messages it goes before, and whose words it is given as (its `role`: a system message
    unless it says "user" or "assistant"); a card without one, or with something else there, has none."""
    extensions = data.get("extensions")
    note = extensions.get("depth_prompt") if isinstance(extensions, dict) else None
    text = note.get("prompt") if isinstance(note, dict) else None
    text = _ORIGINAL.sub("", text).strip() if isinstance(text, str) else ""
    if not text:
        return "", DEFAULT_DEPTH, "system"
    depth = depth_of(note.get("depth"))
    return text, DEFAULT_DEPTH if depth is None else depth, role_of(note.get("role"))


def _alternate_greetings(data: dict, path: Path) -> tuple[str, ...]:
    value = data.get("alternate_greetings") or []
    if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
        raise ConfigError(f"character card {path}: field 'alternate_greetings' should be a list of texts")
    return tuple(g.strip() for g in value if g.strip())


def _text_field(data: dict, key: str, path: Path) -> str:
    value = data.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"character card {path}: field {key!r} should be text")
    return value.strip()


def _card_json_from_png(raw: bytes, path: Path) -> str:
    if not raw.startswith(PNG_SIGNATURE):
        raise ConfigError(f"character card {path}: not a PNG file")
    chunks: dict[str, bytes] = {}
    offset = len(PNG_SIGNATURE)
    while offset + 8 <= len(raw):
        length, kind = struct.unpack(">I4s", raw[offset : offset + 8])
        body = raw[offset + 8 : offset + 8 + length]
        offset += 12 + length
        if kind == b"IEND":
            break
        if kind not in (b"tEXt", b"zTXt", b"iTXt") or b"\x00" not in body:
            continue
        keyword, _, value = body.partition(b"\x00")
        keyword = keyword.decode("latin-1").lower()
        if keyword not in CARD_CHUNKS:
            continue  # other text chunks (a comment, a prompt) are never unpacked
        if kind == b"zTXt":  # keyword \0 method text
            value = _inflate(value[1:], path)
        elif kind == b"iTXt":  # keyword \0 compressed? method language \0 translated keyword \0 text
            compressed, rest = value[:1] == b"\x01", value[2:]
            value = rest.split(b"\x00", 2)[-1]
            if compressed:
                value = _inflate(value, path)
        if value is not None:
            chunks[keyword] = value
    payload = next((chunks[name] for name in CARD_CHUNKS if name in chunks), None)
    if payload is None:
        raise ConfigError(f"character card {path}: the PNG has no 'chara' or 'ccv3' text chunk")
    try:
        return base64.b64decode(payload, validate=False).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise ConfigError(f"character card {path}: the PNG's card chunk is not base64 JSON") from None


def _inflate(data: bytes, path: Path) -> bytes | None:
    """A zlib stream unpacked up to MAX_DECOMPRESSED_BYTES (a bigger one is refused, never
    unpacked whole); None when it is not zlib data."""
    unpacker = zlib.decompressobj()
    try:
        out = unpacker.decompress(data, MAX_DECOMPRESSED_BYTES)
    except zlib.error:
        return None
    if unpacker.unconsumed_tail:
        raise _too_big(path)
    return out


def _too_big(path: Path) -> ConfigError:
    return ConfigError(f"character card {path}: its card data unpacks to more than "
                       f"{MAX_DECOMPRESSED_BYTES // (1024 * 1024)} MB, which no card needs")


def _card_json_from_charx(raw: bytes, path: Path) -> str:
    """A CCv3 .charx: a zip whose card.json is the card (its assets are not needed here)."""
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive, archive.open("card.json") as member:
            data = member.read(MAX_DECOMPRESSED_BYTES + 1)  # the size in the zip's header may lie
        if len(data) > MAX_DECOMPRESSED_BYTES:
            raise _too_big(path)
        return data.decode("utf-8-sig")
    except KeyError:
        raise ConfigError(f"character card {path}: the .charx holds no card.json") from None
    except (zipfile.BadZipFile, UnicodeDecodeError):
        raise ConfigError(f"character card {path}: not a readable .charx (zip) file") from None


@dataclass(frozen=True)
class StoredCharacter:
    """A loaded character with its store id and its system prompt's size (counted once)."""

    character: Character
    id: int
    prompt_tokens: int
