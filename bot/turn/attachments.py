"""Files that come with a message (SPEC section 13): images for a vision model, text files read
as text, and words for whatever the character cannot read.

- An image (at most MAX_IMAGES a turn) is fetched from its platform while the turn waits its
  place, downscaled so its longer side is at most IMAGE_MAX_SIDE pixels, and sent to the model
  as a JPEG data URL. Untrusted input has a budget (SPEC 9): the pixel count is read from the
  header before anything is decoded (above IMAGE_MAX_PIXELS the image is refused), at most
  MAX_DECODING images decode at once in the whole process, and the image is shrunk before it
  is turned upright, so no full-size copy is made. It is not stored: the stored message keeps a short placeholder ("[a
  photo] caption"), so later turns know an image was there.
- A text file (`.txt`, `.md`, code, `text/*`) is read into the stored message, below the
  person's words, cut to what the live window can hold. It is read as a stream up to
  TEXT_MAX_BYTES, never downloaded whole; a file that is not text after all (NUL bytes, or
  mostly bytes that are not UTF-8) is named, not read.
- A voice note is heard where [voice] is on (bot/voice/listening.py).
- Anything else (a sticker, a PDF) is named, and the character says it cannot see it.
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import PurePath
from typing import Sequence

from PIL import Image, ImageOps, UnidentifiedImageError

from bot.contract import IMAGE_MAX_PIXELS, IMAGE_MAX_SIDE, IncomingFile
from bot.model.tokens import TokenCounter
from bot.text import clean_text, listed

log = logging.getLogger(__name__)

MAX_IMAGES = 4
IMAGE_MAX_BYTES = 20 * 1024 * 1024  # bigger images are not fetched
MAX_DECODING = 2  # images decoding at once, in the whole process
_decoding = threading.BoundedSemaphore(MAX_DECODING)  # decoding runs in worker threads
TEXT_MAX_BYTES = 512 * 1024  # a text file is read up to this much
FETCH_TIMEOUT_S = 20.0
TEXT_SUFFIXES = frozenset(
    ".txt .md .markdown .rst .log .csv .tsv .json .jsonl .yaml .yml .toml .ini .cfg .conf .xml .html .htm "
    ".css .js .mjs .ts .tsx .jsx .py .rb .go .rs .java .kt .swift .c .h .cc .cpp .hpp .cs .php .sh .bash "
    ".zsh .ps1 .sql .lua .r .m .scala .hs .ex .exs .erl .dart .vue .svelte .tex .srt .vtt".split()
)


def kind_of(file: IncomingFile) -> str:
    """What the core does with a file: "voice" (to hear, bot/voice/), "image" (to look at),
    "text" (to read) or "other"."""
    if file.spoken:
        return "voice"
    content_type = (file.content_type or "").split(";")[0].strip().lower()
    if content_type.startswith("image/") and content_type != "image/svg+xml":  # SVG is no picture to a model
        return "image"
    if content_type.startswith("text/") or PurePath(file.name.lower()).suffix in TEXT_SUFFIXES:
        return "text"
    return "other"


def in_words(whats: Sequence[str]) -> str:
    """["a photo", "a photo", "a file"] → "2 photos and a file"."""
    counted = Counter(whats)  # keeps the order in which each first came
    named = [what if n == 1 else f"{n} {what.split(' ', 1)[-1]}s" for what, n in counted.items()]
    return listed(named)


NOT_TEXT_SHARE = 0.10  # more undecodable characters than this: the file is not text


async def _fetch(file: IncomingFile, limit: int) -> bytes:
    return await asyncio.wait_for(file.read(limit), FETCH_TIMEOUT_S)


def as_text(data: bytes) -> str | None:
    """The bytes as text, or None when they are not text: a NUL byte, or more than
    NOT_TEXT_SHARE of the characters undecodable as UTF-8 (one cut in half at the end is fine)."""
    if b"\x00" in data:
        return None
    text = data.decode("utf-8", errors="replace")
    return None if text.count("\ufffd") > max(1, len(text) * NOT_TEXT_SHARE) else text


async def read_text_files(files: Sequence[IncomingFile], counter: TokenCounter, room_tokens: int) -> str:
    """The text files, each under a `[file: name]` heading, their texts within `room_tokens` in
    all (a file cut short says so; the headings are not counted); "" when there are none. A file
    that cannot be fetched is named as such."""
    parts = []
    for file in files:
        try:
            data = (await _fetch(file, TEXT_MAX_BYTES))[:TEXT_MAX_BYTES]
        except Exception as failure:  # the platform's error, or a timeout: the words still count
            log.warning("a text file (%s) could not be fetched: %s", file.name, failure or type(failure).__name__)
            parts.append(f"[file: {file.name} — it could not be read]")
            continue
        if (decoded := as_text(data)) is None:
            parts.append(f"[file: {file.name} — not a text file, so it was not read]")
            continue
        text = clean_text(decoded).strip()
        tokens = counter.count(text)
        heading = f"[file: {file.name}]"
        if tokens > room_tokens:
            kept = max(room_tokens, 0)
            text = counter.truncate(text, kept)
            heading = f"[file: {file.name} — only its first {kept:,} of {tokens:,} tokens]"
            tokens = kept
        room_tokens -= tokens
        parts.append(f"{heading}\n{text}" if text else heading)
    return "\n\n".join(parts)


@dataclass(frozen=True)
class PreparedImages:
    looked_at: list[tuple[str, str]]  # (words, data URL) of each image the model is sent
    unreadable: list[str]  # words for the images that could not be fetched or read


async def prepare_images(files: Sequence[IncomingFile]) -> PreparedImages:
    """Fetch and downscale the images (at most MAX_IMAGES; the rest are named unreadable)."""
    looked_at, unreadable = [], []
    for number, file in enumerate(files):
        if number >= MAX_IMAGES or (file.size or 0) > IMAGE_MAX_BYTES:
            unreadable.append(file.what)
            continue
        try:
            data = await _fetch(file, IMAGE_MAX_BYTES + 1)
            if len(data) > IMAGE_MAX_BYTES:  # the platform's size was missing or wrong
                raise ImageTooLarge(f"more than {IMAGE_MAX_BYTES:,} bytes")
            looked_at.append((file.what, await asyncio.to_thread(image_data_url, data)))
        except ImageTooLarge as refused:
            log.warning("an image (%s) was not looked at: %s", file.name, refused)
            unreadable.append(file.what)
        except Exception as failure:  # the platform's error, a timeout, or not an image after all
            log.warning("an image (%s) could not be read: %s", file.name, failure or type(failure).__name__)
            unreadable.append(file.what)
    return PreparedImages(looked_at, unreadable)


class ImageTooLarge(ValueError):
    """An image whose header promises more than IMAGE_MAX_PIXELS pixels."""


def image_data_url(data: bytes) -> str:
    """The image, its longer side at most IMAGE_MAX_SIDE, as a JPEG data URL. Raises
    ImageTooLarge above IMAGE_MAX_PIXELS (read from the header, before decoding) and ValueError when
    the bytes are no image Pillow can read. Blocks while MAX_DECODING others are decoding."""
    try:
        with Image.open(io.BytesIO(data)) as image:  # reads the header only
            width, height = image.size
            if width * height > IMAGE_MAX_PIXELS:
                raise ImageTooLarge(f"{width:,}×{height:,} pixels is over the limit of {IMAGE_MAX_PIXELS:,}")
            with _decoding:
                image.draft("RGB", (IMAGE_MAX_SIDE, IMAGE_MAX_SIDE))  # a JPEG decodes already scaled down
                image.thumbnail((IMAGE_MAX_SIDE, IMAGE_MAX_SIDE))  # in place: decode, then shrink
                upright = ImageOps.exif_transpose(image)  # a copy, of the small image
            if upright.mode != "RGB":
                upright = upright.convert("RGB")
            out = io.BytesIO()
            upright.save(out, "JPEG", quality=85)
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as problem:
        raise ValueError(f"not a readable image ({problem})") from None
    return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode("ascii")
