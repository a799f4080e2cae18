"""Layer 3 — saved memories (SPEC section 5): the budgets, and which entries reach a prompt.

Per person, per scope: 100 unpinned + 20 pinned entries, each ≤ 500 characters. Every turn the
prompt gets all pinned entries of the scopes in play, plus up to 100 unpinned, most recently
updated first, split evenly across the scopes in play (a share one scope does not use goes to
the other). Entries updated in the last 7 days are marked recent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection

from bot.text import length_problem, parse_number
from storage.ports import CHARACTER, GLOBAL, SCOPES, CapReached, ChangeRow, Memories, MemoryCaps, MemoryRow

MAX_UNPINNED_PER_SCOPE = 100
MAX_PINNED_PER_SCOPE = 20
MAX_MEMORY_CHARS = 500
PROMPT_UNPINNED_LIMIT = 100
RECENT_DAYS = 7
CAPS = MemoryCaps(unpinned=MAX_UNPINNED_PER_SCOPE, pinned=MAX_PINNED_PER_SCOPE)
EVERY_MEMORY = CAPS.unpinned + CAPS.pinned  # the most one scope holds: all of it in one read


def is_recent(memory: MemoryRow, now: float) -> bool:
    return now - memory.updated_at <= RECENT_DAYS * 86_400


def split_evenly(available: dict[str, int], total: int) -> dict[str, int]:
    """Share `total` slots evenly across scopes; a share one scope cannot use goes to the rest."""
    shares = {scope: 0 for scope in available}
    remaining = total
    open_scopes = [s for s in available if available[s] > 0]
    while remaining > 0 and open_scopes:
        each, extra = divmod(remaining, len(open_scopes))
        for i, scope in enumerate(open_scopes):
            take = min(each + (1 if i < extra else 0), available[scope] - shares[scope])
            shares[scope] += take
            remaining -= take
        open_scopes = [s for s in open_scopes if shares[s] < available[s]]
    return shares


def memory_text_error(text: str | None) -> str | None:
    """Why a memory text is refused, in words a person understands; None when it is fine."""
    return length_problem(text, MAX_MEMORY_CHARS, what="That memory", empty="A memory needs some text.")


def memory_number(value: object) -> int | None:
    """A memory's number as a person or the model wrote it (`12`, `"#12"`), or None."""
    return parse_number(value.strip().removeprefix("#") if isinstance(value, str) else value)


def memory_marks(memory: MemoryRow, now: float) -> list[str]:
    """What is said about an entry wherever it is shown: its scope, pinned, recent."""
    return [memory.scope] + (["pinned"] if memory.pinned else []) + (["recent"] if is_recent(memory, now) else [])


def cap_text(full: CapReached) -> str:
    """A full budget, in words for the person and the model alike."""
    if full.kind == "pinned":
        return (f"There are already {full.limit} pinned {full.scope} memories, the most there can be. "
                "Unpin or delete one first.")
    return (f"There are already {full.limit} unpinned {full.scope} memories, the most there can be. "
            "Update or delete one first.")


def already_text(kept: MemoryRow, pin: bool = False) -> str:
    """A memory the person already keeps (`AlreadySaved`), in words: `pin`, when it was asked for pinned."""
    text = f"That is already saved as #{kept.id}: nothing was added."
    return text + (f" Pin it with /memory pin {kept.id}." if pin and not kept.pinned else "")


def scope_error(scope: str | None) -> str | None:
    if scope is None or scope in SCOPES:
        return None
    return f"Scope must be {CHARACTER} or {GLOBAL}, not “{str(scope)[:40]}”."


@dataclass(frozen=True)
class SelectedMemories:
    """The saved memories in one prompt: pinned first, then unpinned newest first."""

    pinned: list[MemoryRow]
    unpinned: list[MemoryRow]

    @property
    def all(self) -> list[MemoryRow]:
        return self.pinned + self.unpinned


async def memories_for_prompt(memories: Memories, person_id: int, character_id: int) -> SelectedMemories:
    """All pinned entries of both scopes, plus up to 100 unpinned split evenly across them."""
    in_play = await memories.memories_in_play(person_id, character_id, PROMPT_UNPINNED_LIMIT)
    shares = split_evenly({s: len(in_play.unpinned[s]) for s in SCOPES}, PROMPT_UNPINNED_LIMIT)
    unpinned = [m for s in SCOPES for m in in_play.unpinned[s][: shares[s]]]
    unpinned.sort(key=lambda m: (m.updated_at, m.id), reverse=True)
    return SelectedMemories(pinned=in_play.pinned, unpinned=unpinned)


def change_shown(change: ChangeRow, characters: Collection[int]) -> bool:
    """Whether a change is of a memory of one of these characters, or a global one: the memory
    page shows (and undoes) nothing of a character `[access]` no longer lets the person reach."""
    memory = change.after or change.before
    return memory is not None and (memory.character_id is None or memory.character_id in characters)
