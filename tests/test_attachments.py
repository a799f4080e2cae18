"""SPEC section 13 — images and files: `[llm] vision = "auto" | "on" | "off"`, at most 4 images a
turn, downscaled, never stored; text files read within the window budget. The platform's
download is stood in for by each file's `read`; the model is the scripted OpenAI-compatible
server. (Through the real process, Telegram and Discord: tests/test_platforms_end_to_end.py.)"""

import base64
import io
from dataclasses import replace

import pytest
from PIL import Image

from bot.contract import IncomingFile, IncomingMessage
from bot.memory.window import window_token_budget
from bot.runtime import build_runtime
from bot.turn.attachments import IMAGE_MAX_BYTES, IMAGE_MAX_SIDE, MAX_IMAGES, image_data_url
from tests.conftest import Chat, shown
from tests.fakes.llm_server import text
from tests.probes import peak_rss_rise_mb


def png(width: int = 64, height: int = 48) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 120, 200)).save(out, "PNG")
    return out.getvalue()


def file_of(data: bytes, name: str = "photo.jpg", content_type: str = "image/jpeg", what: str = "a photo",
            fetched: list | None = None) -> IncomingFile:
    async def read(limit: int) -> bytes:
        if fetched is not None:
            fetched.append(name)
        if isinstance(data, Exception):
            raise data
        return data[:limit]
    return IncomingFile(name, content_type, len(data) if isinstance(data, bytes) else None, what, read)


async def send(chat: Chat, words: str, *files: IncomingFile):
    reply = await chat.runtime.turns.handle(IncomingMessage(chat.key, chat.identity, chat.name, words, files=files))
    return await shown(chat.runtime, reply)  # as its adapter would: the line moves once a reply is shown


async def stored_user_texts(chat: Chat) -> list[str]:
    conversation = await chat.runtime.cast.conversation_for(chat.key)
    rows = await chat.runtime.store.conversations.recent_messages(conversation.id, 50)
    return [r.content for r in reversed(rows) if r.role == "user"]


@pytest.fixture
async def chat_with(make_config, clock):
    opened = []

    async def make(**llm_options) -> Chat:
        runtime = await build_runtime(make_config(**llm_options), clock=clock)
        opened.append(runtime)
        return Chat(runtime)
    yield make
    for runtime in opened:
        await runtime.close()


def test_an_image_is_downscaled_to_1024_pixels_on_its_longer_side_as_jpeg():
    url = image_data_url(png(3000, 1000))
    with Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) as image:
        assert image.format == "JPEG" and image.size == (IMAGE_MAX_SIDE, 341)


async def test_with_vision_a_photo_goes_to_the_model_as_an_image_part_and_is_not_stored(chat_with, llm):
    ann = await chat_with(vision="auto")
    reply = await send(ann, "what do you see?", file_of(png()))
    assert not reply.is_error
    assert len(llm.image_parts()) == 1 and llm.image_parts()[0].startswith("data:image/jpeg;base64,")
    assert await stored_user_texts(ann) == ["[a photo] what do you see?"]
    assert "• Images looked at: 1" in (await ann.memory("/memory why")).text


async def test_a_photo_without_a_caption_is_looked_at_not_refused(chat_with, llm):
    ann = await chat_with(vision="on")
    reply = await send(ann, "", file_of(png()))
    assert not reply.is_error and len(llm.image_parts()) == 1
    assert await stored_user_texts(ann) == ["[a photo]"]


async def test_at_most_4_images_a_turn_reach_the_model_and_the_rest_are_named(chat_with, llm):
    ann = await chat_with(vision="on")
    await send(ann, "look", *[file_of(png(), f"p{n}.png", "image/png", "an image") for n in range(MAX_IMAGES + 2)])
    assert len(llm.image_parts()) == 4
    assert "came with 2 images, which you cannot see" in llm.prompt_text()
    assert await stored_user_texts(ann) == ["[6 images] look"]


async def test_with_vision_off_images_are_never_fetched_and_the_caption_is_answered(chat_with, llm):
    ann = await chat_with(vision="off")
    fetched = []
    reply = await send(ann, "what is in this picture?", file_of(png(), fetched=fetched))
    assert not reply.is_error and fetched == [] and llm.image_parts() == []
    assert "came with a photo, which you cannot see" in llm.prompt_text()
    bare = await send(ann, "", file_of(png(), fetched=fetched))
    assert bare.is_error and bare.text.startswith("I can't see a photo — I can only read text.")


async def test_auto_falls_back_to_text_only_when_the_server_refuses_images_and_remembers(chat_with, llm):
    ann = await chat_with(vision="auto")
    llm.sees_images = False
    llm.add(text("It sounds like a lovely sunset."))
    reply = await send(ann, "my sunset photo!", file_of(png()))
    assert reply.text == "It sounds like a lovely sunset."
    assert llm.image_parts(-2) and not llm.image_parts(-1)
    assert "came with a photo, which you cannot see" in llm.prompt_text()
    fetched = []
    await send(ann, "another one", file_of(png(), fetched=fetched))
    assert fetched == [] and len(llm.requests) == 3  # not fetched, not tried again


async def test_with_vision_on_a_refusal_is_an_error_and_the_message_is_kept(chat_with, llm):
    ann = await chat_with(vision="on", max_retries=0)
    llm.sees_images = False
    reply = await send(ann, "look at this", file_of(png()))
    assert reply.is_error and "Your message is saved" in reply.text
    assert await stored_user_texts(ann) == ["[a photo] look at this"]


async def test_an_image_that_cannot_be_fetched_or_read_is_named_as_unseen(chat_with, llm):
    ann = await chat_with(vision="on")
    await send(ann, "two pictures", file_of(b"not an image at all"), file_of(ConnectionError("gone"), "b.jpg"))
    assert llm.image_parts() == []
    assert "came with 2 photos, which you cannot see" in llm.prompt_text()


async def test_an_image_over_20_mb_is_named_and_never_fetched_past_its_cap(chat_with, llm):
    ann = await chat_with(vision="on")
    fetched, huge = [], png() + bytes(IMAGE_MAX_BYTES)  # an image still, its bytes past the end read by none
    told = file_of(huge, "told.jpg", fetched=fetched)  # the platform gives its size: not fetched at all
    untold = replace(file_of(huge, "untold.jpg", fetched=fetched), size=None)  # read up to the cap, then refused
    await send(ann, "two big ones", told, untold)
    assert IMAGE_MAX_BYTES == 20 * 1024 * 1024 and fetched == ["untold.jpg"] and llm.image_parts() == []
    assert "came with 2 photos, which you cannot see" in llm.prompt_text()


async def test_a_text_file_is_read_into_the_message_and_kept(chat_with, llm):
    ann = await chat_with()
    code = b"def greet(name):\n    return f'hello {name}'\n"
    await send(ann, "what does this do?", file_of(code, "greet.py", None, "a file"))
    expected = "what does this do?\n\n[file: greet.py]\ndef greet(name):\n    return f'hello {name}'"
    assert await stored_user_texts(ann) == [expected]
    assert llm.requests[-1]["messages"][-1]["content"] == expected


async def test_a_text_file_longer_than_the_window_budget_is_cut_to_fit_and_says_so(chat_with, llm):
    ann = await chat_with(context_window=8_192)  # window budget: 25 % of it, 2,048 tokens
    budget = window_token_budget(8_192)
    long_text = ("The keeper trims the wick at dusk. " * 2_000).encode()
    reply = await send(ann, "summarise this", file_of(long_text, "log.txt", "text/plain", "a file"))
    assert not reply.is_error
    stored, = await stored_user_texts(ann)
    assert "[file: log.txt — only its first" in stored
    assert ann.runtime.counter.count(stored) <= budget


async def test_a_text_file_that_cannot_be_fetched_is_named_and_the_words_still_answered(chat_with, llm):
    ann = await chat_with()
    reply = await send(ann, "here are my notes", file_of(TimeoutError(), "notes.md", "text/markdown", "a file"))
    assert not reply.is_error
    assert await stored_user_texts(ann) == ["here are my notes\n\n[file: notes.md — it could not be read]"]


async def test_a_file_that_is_neither_image_nor_text_is_named_and_the_caption_answered(chat_with, llm):
    ann = await chat_with()
    await send(ann, "my report", file_of(b"%PDF-1.7", "report.pdf", "application/pdf", "a file"))
    assert "came with a file, which you cannot see" in llm.prompt_text()
    assert await stored_user_texts(ann) == ["[a file] my report"]


async def test_several_long_text_files_are_cut_to_fit_the_window_together(chat_with, llm):
    ann = await chat_with(context_window=8_192)
    long_text = ("The keeper trims the wick at dusk. " * 2_000).encode()
    files = [file_of(long_text, f"log{n}.txt", "text/plain", "a file") for n in range(5)]
    reply = await send(ann, "summarise these", *files)
    assert not reply.is_error
    stored, = await stored_user_texts(ann)
    assert stored.count("[file: log") == 5 and ann.runtime.counter.count(stored) <= window_token_budget(8_192)


def test_an_image_over_40_million_pixels_is_refused_from_its_header_before_decoding():
    from bot.turn.attachments import ImageTooLarge
    from tests.test_untrusted_input_end_to_end import png_of_side

    with pytest.raises(ImageTooLarge, match="6,400×6,400 pixels is over the limit of 40,000,000"):
        image_data_url(png_of_side(6_400))  # 40.96 million pixels


def test_at_most_2_images_decode_at_once_and_none_is_copied_full_size():
    """Four images of 36 million pixels (108 MB decoded each) shrunk at once: two decode at a
    time, each shrunk in place, so the process grows by what two decodes need, not four."""
    rise, _ = peak_rss_rise_mb(
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from bot.turn.attachments import image_data_url\n"
        "from tests.test_untrusted_input_end_to_end import png_of_side\n"
        "image = png_of_side(6_000)\n"
        "with ThreadPoolExecutor(4) as pool:\n"
        "    assert all(pool.map(image_data_url, [image] * 4))\n")
    assert rise < 500  # measured: two at a time about 355 MB, four at once about 725 MB


async def test_a_text_file_is_fetched_only_up_to_512_kb_and_a_binary_one_is_named_not_read(chat_with, llm):
    chat = await chat_with()
    asked = []

    async def read(limit: int) -> bytes:
        asked.append(limit)
        return b"x" * limit
    llm.add(text("Long."), text("Can't read it."))
    await send(chat, "a", IncomingFile("big.txt", "text/plain", 150 * 1024 * 1024, "a file", read))
    assert asked == [512 * 1024]
    await send(chat, "b", file_of(b"\x89PNG\x00\x01" * 100, "notes.txt", "text/plain", "a file"))
    assert (await stored_user_texts(chat))[-1] == "b\n\n[file: notes.txt — not a text file, so it was not read]"
