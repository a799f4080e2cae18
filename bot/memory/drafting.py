"""Memories drafted by the AI for the person to review (SPEC 5.3 and 5.4).

- **/memory generate**: answers "What should the character remember?" from a description the
  person writes (≤ 1,000 characters). It does not read the chat: the model gets the
  description and nothing else.
- **Save from conversation**: from up to 20 messages the person picked, up to 5 drafts to keep
  one of (saved pinned), or the messages as they are.
Nothing is saved until the person keeps a draft.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from bot.memory.saved_memories import MAX_MEMORY_CHARS
from bot.memory.summary_prompts import transcript
from bot.model.llm import LLMClient
from bot.model.tokens import TokenCounter
from bot.text import length_problem
from storage.ports import MessageRow

MAX_DESCRIPTION_CHARS = 1_000
MAX_SELECTED_MESSAGES = 20
MAX_DRAFTS = 5

GENERATE_PROMPT = f"""\
What should {{char}} remember about this person? The person describes themselves below. From \
that description only, write up to {MAX_DRAFTS} memory entries: each one fact that will stay true \
for weeks (a preferred name, a birthday, an allergy, a promise, a lasting preference), in one \
sentence under {MAX_MEMORY_CHARS} characters, naming the person as {{user}}. Do not invent \
anything the description does not say. Answer with a JSON array of strings and nothing else."""

FROM_MESSAGES_PROMPT = f"""\
A person chose the messages below from their conversation with {{char}} because {{char}} should \
remember them. Write up to {MAX_DRAFTS} alternative memory entries capturing what matters in them, \
each one self-contained sentence or two under {MAX_MEMORY_CHARS} characters, naming people by name. \
Do not invent anything the messages do not say. Answer with a JSON array of strings and nothing else."""


def description_error(description: str | None) -> str | None:
    return length_problem(description, MAX_DESCRIPTION_CHARS, what="That description", empty=(
        "Describe what the character should know about you, e.g. /memory generate I'm a nurse on night shifts."))


def strings_in(value: Any) -> list[str]:
    """The strings a JSON value holds, in order, however deep (an array, or an object of them)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [found for item in value for found in strings_in(item)] if isinstance(value, list) else []


def parse_drafts(text: str) -> list[str]:
    """The model's JSON array of strings — or an object holding them, as a small model answers
    (`{"memories": {"1": "…"}}`): never its braces and keys as drafts; a bulleted or numbered list
    is accepted too."""
    items: list = []
    for pattern in (r"\{.*\}", r"\[.*\]"):  # the outermost JSON the answer holds, an object first
        match = re.search(pattern, text, re.DOTALL)
        if match and not items:
            try:
                items = strings_in(json.loads(match.group(0)))
            except json.JSONDecodeError:
                items = []
    if not items:
        items = [re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line) for line in text.splitlines()
                 if not re.fullmatch(r"\s*[\[\]{}]?,?\s*|\s*\"?\w+\"?\s*:\s*[\[{]\s*", line)]
    drafts = []
    for item in items:
        if isinstance(item, str):
            item = item.strip().strip('"').strip()
            if item and len(item) <= MAX_MEMORY_CHARS and item not in drafts:
                drafts.append(item)
    return drafts[:MAX_DRAFTS]


def as_is(messages: list[MessageRow]) -> str:
    """The chosen messages as one memory: one message's text, or 'Name: text' lines."""
    if len(messages) == 1:
        return messages[0].content.strip()
    return transcript(messages)


@dataclass(frozen=True)
class Drafted:
    drafts: list[str]
    tokens_in: int  # what the call cost, as the server's usage says, else as counted (SPEC 17)
    tokens_out: int


async def draft_from_description(llm: LLMClient, counter: TokenCounter, character: str, user: str,
                                 description: str) -> Drafted:
    prompt = GENERATE_PROMPT.replace("{char}", character).replace("{user}", user)
    return await _draft(llm, counter, prompt, description.strip(), max_tokens=600)


async def draft_from_messages(llm: LLMClient, counter: TokenCounter, character: str,
                              messages: list[MessageRow]) -> Drafted:
    prompt = FROM_MESSAGES_PROMPT.replace("{char}", character)
    return await _draft(llm, counter, prompt, transcript(messages), max_tokens=700)


async def _draft(llm: LLMClient, counter: TokenCounter, prompt: str, given: str, max_tokens: int) -> Drafted:
    completion = await llm.complete([{"role": "system", "content": prompt}, {"role": "user", "content": given}],
                                    model=llm.summary_model, max_tokens=max_tokens)
    return Drafted(parse_drafts(completion.text),
                   completion.prompt_tokens or counter.count(prompt) + counter.count(given),
                   completion.completion_tokens or counter.count(completion.text))
