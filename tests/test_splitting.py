"""SPEC section 7 — long replies split at 2,000 (Discord) / 4,096 (Telegram) characters on
paragraph, sentence or word boundaries, with code fences balanced in every chunk."""

from adapters.splitting import open_fence, split_message


def test_a_short_reply_is_one_message():
    assert split_message("Hello there.", 2_000) == ["Hello there."]


def test_a_10000_character_reply_becomes_three_telegram_messages():
    paragraph = ("The sea was calm that evening, and the lamp turned slowly. " * 8).strip()
    text = "\n\n".join([paragraph] * 21)[:10_000]
    chunks = split_message(text, 4_096)
    assert len(chunks) == 3
    assert all(len(c) <= 4_096 for c in chunks)
    assert all(c.endswith(".") or c is chunks[-1] for c in chunks)  # cut at paragraph ends


def test_splits_fall_on_sentence_then_word_boundaries():
    sentences = " ".join(f"Sentence number {i} is here." for i in range(200))
    for chunk in split_message(sentences, 500)[:-1]:
        assert chunk.endswith(".")
    words = " ".join(["word"] * 1_000)
    assert all(not c.startswith(" ") and c.replace(" ", "").replace("word", "") == ""
               for c in split_message(words, 333))


def test_a_5000_character_reply_with_a_code_block_keeps_fences_balanced_in_every_chunk():
    code = "\n".join(f"    print('line {i}')" for i in range(230))
    text = "Here is the script:\n\n```python\n" + code + "\n```\n\nThat is all. " + "Bye. " * 40
    assert len(text) > 5_000
    chunks = split_message(text, 2_000)
    assert len(chunks) >= 3
    for chunk in chunks:
        assert len(chunk) <= 2_000
        assert open_fence(chunk) is None
    assert chunks[1].startswith("```python\n")  # reopened with its language
    rejoined = "".join(c.removeprefix("```python\n").removesuffix("\n```") for c in chunks)
    assert "print('line 229')" in rejoined


def test_an_unclosed_fence_from_the_model_is_closed():
    chunks = split_message("```\nforever open", 2_000)
    assert chunks == ["```\nforever open\n```"]
