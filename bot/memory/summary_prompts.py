"""The prompts that write the conversation summary, at the Balanced detail level.

Balanced keeps important events, promises and how things changed, at moderate detail. Every
prompt forbids invention, and every one keeps `[verbatim]` lines — corrections and rules a
person gave, and entries a person edited — exactly as written (the code checks that too, and
keeps as one only a line whose words were said: `keep_verbatim`).
"""

from __future__ import annotations

import re

from bot.text import listed
from storage.ports import MessageRow

VERBATIM_MARK = "[verbatim]"
QUOTED = re.compile(r'["“](.+)["”]')
SAID_BY = re.compile(rf"^{re.escape(VERBATIM_MARK)}\s*(?:[^:\n]{{1,40}}:)?\s*")  # the mark and a name
WORD = re.compile(r"\w+")
VERBATIM_EXAMPLE = f'{VERBATIM_MARK} Name: "their exact words"'  # the rules' own example of such a line

_RULES = f"""\
Rules:
- Balanced detail: keep important events, decisions, promises (who promised what to whom, and \
whether it was kept), and how things and relationships changed. Leave out small talk.
- Say who said or did what, by name. Keep exact names, dates, times, numbers and places.
- Never invent or guess anything that is not in the text you were given.
- When a person corrects {{char}} or gives {{char}} a rule ("don't call me Annie", "always answer \
in French"), write it on its own line as: {VERBATIM_EXAMPLE}.
- Copy every line that starts with {VERBATIM_MARK} exactly as it is, character for character.
- Write short lines starting with "- ", in the past tense. No introduction, no closing remark."""

BATCH_PROMPT = """\
You keep the memory of a conversation for {who} in a chat.
Summarize the messages below (they follow what was summarized before) as one short entry.

""" + _RULES

MERGE_PROMPT = """\
You keep the memory of a conversation for {who} in a chat.
Below are consecutive summaries of one conversation, oldest first. Merge them into one summary of \
the whole stretch, shorter than their sum, keeping the order of events.

""" + _RULES

FOLD_PROMPT = """\
You keep the long-term memory of a conversation for {who} in a chat.
Below are consecutive summaries, oldest first. Condense them into one timeline entry for the \
long-term memory: a first line giving the stretch of time it covers if the text says it, then the \
events that will still matter later: promises, decisions, changes in how things stand.

""" + _RULES

COMPACT_PROMPT = """\
You keep the long-term memory of a conversation for {who} in a chat. It has grown \
too long. Below are its earliest timeline entries. Rewrite them as short period overviews, about \
a third of their length. Keep only: promises that are still open, exact names and numbers, and \
the current state of things (what is true now). Drop what was resolved or no longer matters.

""" + _RULES


def transcript(messages: list[MessageRow]) -> str:
    return "\n".join(f"{m.speaker_name}: {m.said}" for m in messages)


def system_message(template: str, character_names: list[str]) -> dict[str, str]:
    """The prompt for the characters the conversation is with: one, or a scene's (SPEC 15)."""
    names = listed(character_names)
    who = f"{names}, {'a character' if len(character_names) == 1 else 'characters'}"
    return {"role": "system", "content": template.format(who=who, char=names)}


def verbatim_lines(*texts: str) -> list[str]:
    return [line.strip() for text in texts for line in text.splitlines()
            if line.strip().startswith(VERBATIM_MARK)]


def keep_verbatim(inputs: list[str], output: str) -> str:
    """The model's summary of `inputs` with their [verbatim] lines, each kept for good: any it
    dropped is appended. A [verbatim] line it wrote is one only where its words are in what it
    was given (someone's correction, as they said it); else it is kept as an ordinary line, so
    no word the model made up is carried into every summary after. The rules' own example,
    copied back by a small model, goes."""
    given = _words("\n".join(inputs))
    lines = []
    for line in output.strip().splitlines():
        if line.strip().startswith(VERBATIM_MARK) and _words(_quoted(line)) not in given:
            if _words(line) == _words(VERBATIM_EXAMPLE):
                continue
            line = line.strip()[len(VERBATIM_MARK):].strip()
        lines.append(line)
    output = "\n".join(lines).strip()
    missing = [line for line in dict.fromkeys(verbatim_lines(*inputs)) if line not in output]
    return "\n".join([output, *missing]) if missing else output


def _quoted(line: str) -> str:
    """What a [verbatim] line says someone said: its words in quotes, else those after its name."""
    found = QUOTED.search(line)
    return found.group(1) if found else SAID_BY.sub("", line.strip(), count=1)


def _words(text: str) -> str:
    """A text's words alone, lower-cased, one space apart: what it says, whatever its punctuation."""
    return " ".join(WORD.findall(text.casefold()))


def as_verbatim(text: str) -> str:
    """An entry the person edited, marked so every later merge keeps it as written."""
    return "\n".join(f"{VERBATIM_MARK} {line}" if not line.startswith(VERBATIM_MARK) else line
                     for line in text.strip().splitlines() if line.strip())
