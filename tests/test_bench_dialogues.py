"""The equal-token baseline of bench/dialogues.py (#39): a plain retriever given exactly the room
the recall block took — its best hits, each with a neighbour each side, in rank order, never past
the block's tokens."""

from bench.dialogues import _within, bm25
from bot.model.tokens import TokenCounter

ARCHIVE = [f"line {n}: the weather was grey" for n in range(20)] + [
    "Caroline adopted a dog called Biscuit", "Biscuit loves the beach", "the beach was windy"]


def test_the_baseline_takes_its_best_hits_with_neighbours_within_the_blocks_tokens():
    counter = TokenCounter("gpt-4o-mini")
    hits = bm25(ARCHIVE, "what is Caroline's dog called?", len(ARCHIVE))
    assert hits[0] == 20
    one_group = sum(counter.count(ARCHIVE[j]) + 1 for j in (19, 20, 21))
    assert _within(ARCHIVE, hits, one_group, counter) == ARCHIVE[19:22]
    assert _within(ARCHIVE, hits, one_group - 1, counter) == []  # never past the budget
    assert _within(ARCHIVE, hits, 0, counter) == []
