"""Splitting a long reply into platform-sized messages (Discord 2,000, Telegram 4,096).

Cuts on a paragraph break, else a line break, else a sentence end, else a space, else hard; a
``` code fence open at a cut is closed at the end of that chunk and reopened (same language) at
the start of the next, so every chunk has balanced fences.
"""

from __future__ import annotations

import re

FENCE = "```"
_SENTENCE_END = re.compile(r"[.!?…](?=\s)")


def open_fence(text: str) -> str | None:
    """The opening line of a ``` fence left open at the end of `text`, or None."""
    opener = None
    for line in text.splitlines():
        if line.lstrip().startswith(FENCE):
            opener = None if opener is not None else line.strip()
    return opener


def _cut(text: str, limit: int) -> int:
    """Where to cut `text` so the first part is at most `limit` characters."""
    window = text[:limit]
    floor = limit // 3  # never cut so early that chunks become tiny
    for separator in ("\n\n", "\n"):
        at = window.rfind(separator)
        if at > floor:
            return at + len(separator)
    sentence_ends = [m.end() for m in _SENTENCE_END.finditer(window)]
    if sentence_ends and sentence_ends[-1] > floor:
        return sentence_ends[-1]
    at = window.rfind(" ")
    if at > floor:
        return at + 1
    return limit


def split_message(text: str, limit: int) -> list[str]:
    chunks: list[str] = []
    reopen = ""
    remaining = text.strip("\n")
    close = "\n" + FENCE
    while remaining:
        whole = reopen + remaining
        if len(whole) <= limit and open_fence(whole) is None:
            chunks.append(whole)
            break
        if len(whole) + len(close) <= limit:  # fits, but its fence was never closed
            chunks.append(whole + close)
            break
        cut = _cut(remaining, limit - len(reopen) - len(close))
        piece = (reopen + remaining[:cut]).rstrip()
        remaining = remaining[cut:].lstrip("\n")
        fence = open_fence(piece)
        if fence is not None:
            piece += close
            reopen = fence + "\n"
        else:
            reopen = ""
        if piece.strip():
            chunks.append(piece)
    return chunks or [""]
