"""A reply in the character's own voice: never another's lines, never its own name before it.

Small local models write a chat as a script: a reply may begin with the character's name
("Mira: Tea?") and go on with the person's next line ("\\nAnn: yes please") and the character's
answer to it. What the person answers is theirs to write, as what another character or person
of a shared chat says is theirs: the reply ends before the first line in one of their names.
The character's name at the start of the reply is dropped (the platform shows who speaks).
A line counts as in a name when it begins with the name and a colon, the name perhaps in bold
or italics (`**Ann:**`), whatever its case. Every text the model writes as the character goes
through it: a turn's reply (bot/turn/handler.py) and a letter written first, a check-in's or a
reminder's (bot/writing_first/outbox.py).

While a reply streams, what is shown holds back what may still turn out to be such a name: the
start, while it could still be the character's, and a last line that could still be one of
the others'. So what a person sees of a streaming reply is always the start of what is kept.
"""

from __future__ import annotations

import re
from typing import Iterable

from storage.ports import MessageRow

MARKS = "*_"  # bold or italics around a name


def _named(name: str) -> str:
    """A line's start in `name`: the name, perhaps marked, then a colon."""
    return rf"[ \t]*[{MARKS}]{{0,2}}{re.escape(name)}[{MARKS}]{{0,2}}[ \t]*:[{MARKS}]{{0,2}}"


class OwnVoice:
    """The reply of `character` among `others` (the names of those it answers: the person of
    the message answered, and in a shared chat everyone else who speaks there)."""

    def __init__(self, character: str, others: Iterable[str]):
        names = [name for name in dict.fromkeys(o.strip() for o in others)
                 if name and name.casefold() != character.casefold()]
        self.own_name = re.compile(rf"\A\s*{_named(character)}[ \t]*", re.IGNORECASE)
        self.their_line = re.compile("|".join(f"^{_named(name)}" for name in names) or r"(?!)",
                                     re.IGNORECASE | re.MULTILINE)
        self._own_start = f"{character}:"
        self._their_starts = [f"{name}:" for name in names]

    @classmethod
    def answering(cls, character: str, speaker: str, window: Iterable[MessageRow]) -> "OwnVoice":
        """The voice of `character` answering `speaker` in a chat whose live window is `window`
        (in a shared chat, everyone who speaks there is among the others)."""
        return cls(character, [speaker, *(message.speaker_name for message in window)])

    def kept(self, text: str) -> str:
        """The whole reply as it is kept: without the character's name before it, and ended
        before the first line in another's name — unless nothing comes before that line."""
        text = self.own_name.sub("", text, count=1)
        found = self.their_line.search(text)
        if found is not None and text[: found.start()].strip():
            text = text[: found.start()]
        return text.strip()

    def shown(self, streamed: str) -> str:
        """What of a reply still streaming may be shown: as `kept` would keep it, less what may
        still become the character's name at its start or another's at its last line's."""
        if _may_become(streamed, self._own_start):
            return ""
        text = self.kept(streamed)
        head, newline, last = text.rpartition("\n")
        held = newline and any(_may_become(last, start) for start in self._their_starts)
        return head.strip() if held else text


def _may_become(text: str, start: str) -> bool:
    """Whether `text` could still grow into a line that begins with `start` (a name and colon),
    spaces and marks aside."""
    bare, whole = _bare(text), _bare(start)
    return bool(text.strip()) and len(bare) < len(whole) and whole.startswith(bare)


def _bare(text: str) -> str:
    return "".join(c for c in text if not c.isspace() and c not in MARKS).casefold()
