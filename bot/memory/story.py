"""Every memory with its story (SPEC 21): where it came from, when it last reached a prompt and how
often, and what each reply used — read from what is kept already (a memory's source and time,
the journal entry of the turn that wrote it, every reply's receipt), so nothing is counted on a
turn's path. Only the person's own: their own message a memory came from, their own replies."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import NamedTuple

from bot.contract import PageChange, PageReply, traits_of
from storage.ports import ChangeRow, ConversationRow, MemoryRow, MessageRow, ReplyReceipt

RECEIPTS_READ = 1_000  # the person's latest replies whose receipts say how often a memory reached a prompt
REPLIES_SHOWN = 20  # each character's latest replies to the person, with their receipts
OPENING = 80  # characters of a reply or a message quoted

WRITTEN_BY = {
    "person": "written by you",
    "page": "written by you on this page",
    "ai": "written by {character} mid-reply",
    "generate": "a draft you kept (/memory generate)",
    "conversation": "saved from the chat by you (/memory save)",
    "import": "imported by you from an export",
}


def day(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d")


def quoted(text: str) -> str:
    return f"“{text[:OPENING]}{'…' if len(text) > OPENING else ''}”"


def memories_used(receipt: dict) -> tuple[int, ...]:
    """The saved memories a reply's prompt held, pinned first."""
    held = receipt.get("memories") or {}
    return tuple([*held.get("pinned", ()), *held.get("unpinned", ())])


class Used(NamedTuple):
    """How often a memory reached a reply's prompt, among the receipts read, and when last."""

    times: int
    last: float


def times_used(receipts: list[ReplyReceipt]) -> dict[int, Used]:
    """Each memory's use among these receipts (newest first). A page reads a thousand receipts
    of 140 memories each: counted by Counter and dict.update, not one by one."""
    counts: Counter[int] = Counter()
    last: dict[int, float] = {}
    for reply in reversed(receipts):  # oldest first: a later time replaces an earlier one
        held = memories_used(reply.receipt)
        counts.update(held)
        last.update(dict.fromkeys(held, reply.at))
    return {memory_id: Used(times, last[memory_id]) for memory_id, times in counts.items()}


def chat_words(conversation: ConversationRow) -> str:
    """The chat a memory was written in, without naming a group."""
    traits = traits_of(conversation.platform)
    if not traits.chat:  # the console
        return f"in {traits.shown_as}"
    return f"in a {traits.shown_as} group" if conversation.is_shared else f"in your {traits.shown_as} chat"


def story(memory: MemoryRow, character: str, written_from: MessageRow | None, used: Used | None,
          chat: ConversationRow | None = None) -> str:
    """Who wrote it, when and in which chat; the person's message it came from (one a character
    wrote); when it last reached a prompt and how often."""
    by = WRITTEN_BY.get(memory.source, "written {source}").format(character=character, source=memory.source)
    parts = [f"{by}{' ' + chat_words(chat) if chat is not None else ''}, {day(memory.created_at)}"]
    if written_from is not None:
        parts.append(f"from your message {quoted(written_from.content)} ({day(written_from.created_at)})")
    if used is not None:
        times = "once" if used.times == 1 else f"{used.times:,} times"
        parts.append(f"in a reply's prompt {times}, last {day(used.last)}")
    else:
        parts.append("not in a reply's prompt yet")
    return "; ".join(parts)


DONE = {"add": "added", "update": "changed", "delete": "deleted", "pin": "pinned", "unpin": "unpinned"}


def page_change(change: ChangeRow, characters: dict[int, str]) -> PageChange:
    """A change as the history says it: who, what, when; whether it may be undone."""
    who = "you" if change.character_id is None else f"{characters.get(change.character_id, 'a character')} mid-reply"
    shown = change.after or change.before
    assert shown is not None  # a change has the memory before or after it
    what = f"{DONE.get(change.action, change.action)} #{change.memory_id}"
    if change.action == "update" and change.before is not None and change.after is not None:
        what += f" {quoted(change.before.content)} → {quoted(change.after.content)}"
    elif change.action in ("add", "delete"):
        what += f" {quoted(shown.content)}{' (pinned)' if shown.pinned else ''}"
    return PageChange(change.id, day(change.at), who, what, change.latest and not change.undone, change.undone)


def page_reply(reply: ReplyReceipt) -> PageReply:
    """A reply with what its prompt held, in one line: summary tiers, recalled passages, tools, tokens."""
    receipt = reply.receipt
    tiers = receipt.get("summary") or {}
    tools = sorted({call["name"] for call in receipt.get("tools", ())})
    layers = [f"summary: long-term {tiers.get('long_term', 0)}, merged {tiers.get('merged', 0)}, recent "
              f"{tiers.get('recent', 0)}", f"recalled passages: {len(receipt.get('recall', ()))}"]
    if tools:
        layers.append(f"tools: {', '.join(tools)}")
    layers.append(f"≈ {receipt.get('tokens', {}).get('total', 0):,} tokens")
    opening = quoted(reply.reply) if reply.reply is not None else "(no longer stored)"
    return PageReply(reply.turn_id, day(reply.at), opening, memories_used(receipt), " · ".join(layers))
