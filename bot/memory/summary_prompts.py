"""The prompts that write the conversation summary, at the Balanced detail level.

Balanced keeps important events, promises and how things changed, at moderate detail. Every
prompt forbids invention, and every one keeps `[verbatim]` lines — corrections and rules a
person gave, and entries a person edited — exactly as written (the code checks that too).
"""

from __future__ import annotations

from bot.text import listed
from storage.ports import MessageRow

VERBATIM_MARK = "[verbatim]"

_RULES = f"""\
Rules:
- Balanced detail: keep important events, decisions, promises (who promised what to whom, and \
whether it was kept), and how things and relationships changed. Leave out small talk.
- Say who said or did what, by name. Keep exact names, dates, times, numbers and places.
- Never invent or guess anything that is not in the text you were given.
- When a person corrects {{char}} or gives {{char}} a rule ("don't call me Annie", "always answer \
in French"), write it on its own line as: {VERBATIM_MARK} Name: "their exact words".
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
    """Append any [verbatim] line of the inputs the model dropped: they are never lost."""
    missing = [line for line in dict.fromkeys(verbatim_lines(*inputs)) if line not in output]
    return "\n".join([output.strip(), *missing]) if missing else output.strip()


def as_verbatim(text: str) -> str:
    """An entry the person edited, marked so every later merge keeps it as written."""
    return "\n".join(f"{VERBATIM_MARK} {line}" if not line.startswith(VERBATIM_MARK) else line
                     for line in text.strip().splitlines() if line.strip())
