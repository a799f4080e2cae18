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


def _session(opening: str, count: int) -> list[dict]:
    """Melanie opens with `opening`, then the two alternate with small talk."""
    lines = [("Melanie", opening)] + [(("Caroline", "Melanie")[n % 2], f"small talk {n} about the grey weather")
                                      for n in range(count)]
    return [{"speaker": who, "text": said} for who, said in lines]


def _conversation() -> dict:
    """Two sessions of LoCoMo's shape, each opened by the second speaker, two questions asked."""
    sessions = [_session("hi Caroline, welcome to the island", 60), _session("I adopted a puppy called Biscuit!", 60)]
    conversation = {"speaker_a": "Caroline", "speaker_b": "Melanie",
                    "session_1_date_time": "1:00 pm on 8 May, 2023", "session_2_date_time": "2:00 pm on 15 May, 2023",
                    "qa": [{"question": "What is Melanie's puppy called?", "evidence": ["D2:1"]},
                           {"question": "How did Melanie welcome Caroline?", "evidence": ["D1:1"]}]}
    for n, lines in enumerate(sessions, 1):
        conversation[f"session_{n}"] = [line | {"dia_id": f"D{n}:{k}"} for k, line in enumerate(lines, 1)]
    return conversation


async def test_a_session_the_character_opens_is_stored_as_its_greeting_or_a_check_in():
    """The replay stores every line the baselines search: where the second speaker opens a
    session, as the greeting (the first) or a check-in after the person's absence (later ones),
    never dropped; the archive and the store hold the same messages (the replay asserts it)."""
    from bench.dialogues import replay

    tallies = await replay(_conversation(), TokenCounter("gpt-4o-mini"), None)
    assert tallies["keepsake"].found == tallies["keepsake"].evidence == 2


async def test_the_prefix_cache_benchmark_replays_the_windows_steps_against_one_place_at_a_time():
    """bench.prefix_cache's two replays give the same turns' prompts, the window's start moving on
    WINDOW_STEP (4) places at a time and on one place at a time; the first repeat more of the
    prompt before them, and the bot's step is as it was afterwards."""
    from bench.prefix_cache import prompts_of
    from bot.memory import window

    stepped, stepped_share = await prompts_of(_conversation(), window.WINDOW_STEP)
    sliding, sliding_share = await prompts_of(_conversation(), 1)
    assert window.WINDOW_STEP == 4
    assert len(stepped) == len(sliding) > 50
    assert stepped != sliding
    assert stepped_share > sliding_share
