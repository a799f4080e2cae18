"""Taking memories away and bringing them back (SPEC 21 "Export and import"): the export as
Markdown, to read (the JSON export, `/memory export`, is what import reads), and the memory page's
import of a JSON export — memories and persona, merged without duplicates, under the same limits
as any memory, into the importing person's own memories only: whoever's export it is, nothing in
the file says whose memories it writes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bot.commands.base import UsageError, plural
from bot.commands.persona import MAX_PERSONA
from bot.memory.saved_memories import memory_text_error
from bot.model.tokens import TokenCounter
from bot.text import clean_text
from storage.ports import CHARACTER, GLOBAL, AlreadySaved, CapReached, Persona, Store

NOT_AN_EXPORT = ("That file is not a Keepsake export (the JSON file /memory export or the page's “Export (JSON)” "
                 "gives): {why}.")


def as_markdown(data: dict[str, Any]) -> str:
    """A JSON export (as `/memory export` makes it) as a Markdown page: the persona, then each
    character's memories and the global ones, pinned first."""
    lines = ["# What the characters remember about you", "",
             f"Exported {data['exported_at']} · accounts: {', '.join(data['identities']) or '—'}", ""]
    if data.get("persona"):
        lines += ["## Your persona", "", data["persona"], ""]
    groups: dict[str, list[dict]] = {}
    for memory in data["memories"]:
        title = f"Only {memory['character']}" if memory["scope"] == CHARACTER else "Every character (global)"
        groups.setdefault(title, []).append(memory)
    for title, memories in groups.items():
        lines += [f"## {title}", ""]
        for memory in sorted(memories, key=lambda m: not m["pinned"]):
            pin = "📌 " if memory["pinned"] else ""
            lines.append(f"- {pin}{memory['content']} (#{memory['id']}, {memory['created_at'][:10]})")
        lines.append("")
    if not data["memories"]:
        lines += ["No saved memories.", ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class Imported:
    """What an import did, said in one line (`text`)."""

    added: int
    already: int  # the same text was there already, in the same place
    refused: dict[str, int]  # why others were not added, with how many
    persona: str  # "added", "kept yours", "too long" or "" (none in the file, or the same)

    @property
    def text(self) -> str:
        parts = [f"Imported {plural(self.added, 'memory', 'memories')}"]
        if self.already:
            parts.append(f"{self.already:,} {'was' if self.already == 1 else 'were'} here already")
        parts += [f"{count:,} not: {why}" for why, count in self.refused.items()]
        if self.persona == "added":
            parts.append("your persona is the one in the file")
        elif self.persona == "kept yours":
            parts.append("the file's persona was not taken: you have your own (change it below)")
        elif self.persona == "too long":
            parts.append(f"the file's persona was not taken: it is over {MAX_PERSONA:,} characters")
        return "; ".join(parts) + "."


def read_export(text: str) -> dict[str, Any]:
    """The memories and persona of a JSON export, or a UsageError saying what is wrong with it."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as problem:
        raise UsageError(NOT_AN_EXPORT.format(why=f"it is not JSON ({problem.msg}, line {problem.lineno})")) from None
    if not isinstance(data, dict) or not isinstance(data.get("memories"), list):
        raise UsageError(NOT_AN_EXPORT.format(why="it has no list of memories"))
    if not all(isinstance(m, dict) for m in data["memories"]):
        raise UsageError(NOT_AN_EXPORT.format(why="a memory in it is not a JSON object"))
    return data


async def import_export(store: Store, counter: TokenCounter, person_id: int, text: str,
                        characters: dict[str, int]) -> Imported:
    """Merge a JSON export into the person's own memories. `characters`: the characters whose
    memories the person may keep here (lower-cased name → id: those their page shows); a memory
    of another character is not taken. The first of them carries global memories."""
    data = read_export(text)
    assert characters, "the page shows at least one character"
    anyone = next(iter(characters.values()))
    added, already, refused = 0, 0, {}

    def refuse(why: str) -> None:
        refused[why] = refused.get(why, 0) + 1

    for memory in data["memories"]:
        content, scope = memory.get("content"), memory.get("scope", CHARACTER)
        if not isinstance(content, str) or memory_text_error(clean_text(content).strip()) or scope not in (
                CHARACTER, GLOBAL):
            refuse("not a memory Keepsake can keep (empty, too long, or of no scope)")
            continue
        content = clean_text(content).strip()
        character_id = anyone if scope == GLOBAL else characters.get(str(memory.get("character", "")).casefold())
        if character_id is None:
            refuse("for a character your page does not show")
            continue
        try:
            await store.memories.add_memory(person_id, character_id, scope, content, counter.count(content),
                                            pinned=memory.get("pinned") is True, source="import")
        except AlreadySaved:
            already += 1
            continue
        except CapReached as full:
            refuse(f"{full.kind} {'global' if scope == GLOBAL else 'character'} memories are at their limit "
                   f"of {full.limit}")
            continue
        added += 1
    return Imported(added, already, refused, await _persona(store, counter, person_id, data.get("persona")))


async def _persona(store: Store, counter: TokenCounter, person_id: int, persona: Any) -> str:
    """The file's persona becomes the person's when they have none (theirs is never replaced)."""
    if not isinstance(persona, str) or not (persona := clean_text(persona).strip()):
        return ""
    current = await store.people.persona(person_id)
    if current is not None:
        return "" if current.text == persona else "kept yours"
    if len(persona) > MAX_PERSONA:
        return "too long"
    await store.people.set_persona(person_id, Persona(persona, counter.count(persona)))
    return "added"
