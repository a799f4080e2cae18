"""SPEC 8, the whole prompt within the context: what a reply can best do without goes first, one
piece at a time (bot/turn/fit.py); the newest 4 messages of the window and the card always stay."""

from bot.characters.lorebook import LoreEntry
from bot.memory.recall import Passage
from bot.memory.saved_memories import SelectedMemories
from bot.turn.context import Context
from bot.turn.fit import without_one
from storage.ports import MemoryRow, MessageRow, Persona, SummaryRow


def message(pos: int) -> MessageRow:
    return MessageRow(pos, 1, pos, "user", 1, "Ann", f"line {pos}", 5, None, 0.0)


def memory(number: int, pinned: bool) -> MemoryRow:
    return MemoryRow(number, 1, 1, f"memory {number}", 5, pinned, "person", 0.0, 0.0)


def pieces(context: Context) -> tuple:
    """What a prompt of `context` holds, piece by piece."""
    memories = context.memories
    return (len(context.recalled), [entry.name for entry in context.lore], [m.pos for m in context.window],
            [row.first_pos for row in context.summary], [m.id for m in memories.unpinned],
            context.persona is not None, [m.id for m in memories.pinned])


def test_a_prompt_too_long_loses_recall_lore_old_lines_summary_memories_persona_in_turn_and_keeps_4_lines():
    context = Context(
        character=None, shared=False,
        memories=SelectedMemories([memory(1, True), memory(2, True)], [memory(5, False), memory(4, False)]),
        summary=[SummaryRow(1, 1, "long_term", "long ago", 5, 0, 9), SummaryRow(2, 1, "recent", "lately", 5, 10, 19)],
        window=[message(pos) for pos in range(20, 26)], recalled=[Passage([message(3)], 9)],
        lore=[LoreEntry("harbour", "The harbour…"), LoreEntry("lamp", "The lamp…")],
        persona=Persona("Ann, a sailor", 5))
    seen = [pieces(context)]
    while (context := without_one(context)) is not None:
        seen.append(pieces(context))
    assert seen == [
        (1, ["harbour", "lamp"], [20, 21, 22, 23, 24, 25], [0, 10], [5, 4], True, [1, 2]),
        (0, ["harbour", "lamp"], [20, 21, 22, 23, 24, 25], [0, 10], [5, 4], True, [1, 2]),  # recall first
        (0, ["harbour"], [20, 21, 22, 23, 24, 25], [0, 10], [5, 4], True, [1, 2]),  # then lore
        (0, [], [20, 21, 22, 23, 24, 25], [0, 10], [5, 4], True, [1, 2]),
        (0, [], [21, 22, 23, 24, 25], [0, 10], [5, 4], True, [1, 2]),  # the oldest lines of the window
        (0, [], [22, 23, 24, 25], [0, 10], [5, 4], True, [1, 2]),  # the newest 4 stay
        (0, [], [22, 23, 24, 25], [10], [5, 4], True, [1, 2]),  # the summary's oldest layer
        (0, [], [22, 23, 24, 25], [], [5, 4], True, [1, 2]),
        (0, [], [22, 23, 24, 25], [], [5], True, [1, 2]),  # unpinned memories, the oldest first
        (0, [], [22, 23, 24, 25], [], [], True, [1, 2]),
        (0, [], [22, 23, 24, 25], [], [], False, [1, 2]),  # the persona
        (0, [], [22, 23, 24, 25], [], [], False, [1]),  # pinned memories last
        (0, [], [22, 23, 24, 25], [], [], False, []),
    ]  # and then nothing more goes: the card stays
