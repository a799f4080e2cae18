"""SPEC section 9, "untrusted input has a budget", measured on the real `python -m bot` process
over the fake Telegram Bot API: what one hostile file costs the process in memory (its peak
resident set, from /proc), and what the person is told."""

import asyncio
import struct
import zlib
from pathlib import Path

import pytest

from tests.fakes.llm_server import text
from tests.test_end_to_end import start_bot, stop_bot, write_config
from tests.test_hardening_end_to_end import final_reply_to

ANN, BOB = 801, 802
MB = 1024 * 1024


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set so far (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc")


def png_of_side(side: int) -> bytes:
    """An RGB PNG `side` pixels square, all black: a few hundred KB that decode to side² × 3 bytes."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    packer, row = zlib.compressobj(9), b"\x00" * (1 + side * 3)
    pixels = b"".join([packer.compress(row) for _ in range(side)] + [packer.flush()])
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", pixels) + chunk(b"IEND", b""))


@pytest.fixture
async def bot(tmp_path, llm, telegram):
    config = write_config(tmp_path, llm, telegram)
    process = await start_bot(config, telegram, tmp_path, log_level="INFO")
    llm.default = "ok"
    warm = telegram.send(telegram.chat(BOB), telegram.user(BOB, "Bob"), "hello")  # imports and caches loaded
    await final_reply_to(telegram, BOB, warm)
    yield process
    process.stderr_text = await stop_bot(process)


@pytest.mark.timeout(120)
async def test_two_images_of_13000_by_13000_pixels_at_once_raise_memory_by_under_400_mb(bot, llm, telegram):
    huge = png_of_side(13_000)  # 169 million pixels: 507 MB decoded, each
    assert len(huge) < MB
    before = peak_rss_mb(bot.pid)
    ann, dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
    llm.add(text("I can't make that one out."), text("Nor that one."))
    first = telegram.send(dm, ann, "look", photo=huge)
    second = telegram.send(dm, ann, "and this", photo=huge)
    await final_reply_to(telegram, ANN, first)
    await final_reply_to(telegram, ANN, second)
    assert peak_rss_mb(bot.pid) - before < 400
    asked = [m for r in llm.requests[-2:] for m in r["messages"] if m["role"] == "user"]
    assert all(isinstance(m["content"], str) for m in asked)  # no image part reached the model
    assert "you cannot see" in llm.prompt_text()


@pytest.mark.timeout(120)
async def test_a_150_mb_text_file_is_read_only_up_to_its_cap(bot, llm, telegram):
    line = b"the keeper writes in the log every night at nine.\n"
    huge = line * (150 * MB // len(line))
    before = peak_rss_mb(bot.pid)
    ann, dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
    llm.add(text("What a long log."))
    said = telegram.send(dm, ann, "read this", document=("log.txt", "text/plain", huge))
    assert (await final_reply_to(telegram, ANN, said)).text == "What a long log."
    assert peak_rss_mb(bot.pid) - before < 100  # 150 MB is never held, nor its 512 KB many times
    assert "[file: log.txt — only its first" in llm.prompt_text()


@pytest.mark.timeout(120)
async def test_a_binary_file_named_txt_is_named_as_unreadable_not_sent_to_the_model(bot, llm, telegram):
    ann, dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
    llm.add(text("I can't read that file."))
    binary = bytes(range(256)) * 4_000
    said = telegram.send(dm, ann, "notes attached", document=("notes.txt", "text/plain", binary))
    await final_reply_to(telegram, ANN, said)
    prompt = llm.prompt_text()
    assert "[file: notes.txt — not a text file, so it was not read]" in prompt
    assert "\ufffd" not in prompt


@pytest.mark.timeout(120)
async def test_a_catastrophic_lorebook_key_delays_another_chats_reply_by_under_2_seconds(tmp_path, llm, telegram):
    """A card whose keys backtrack for hours on "aaa…!" (one WARNING each, then skipped): Bob's
    reply in another chat, asked while Ann's message is matched, comes within 2 s."""
    import json
    import time

    traps = [{"name": f"Trap {n}", "keys": [f"/(a|aa)+{n}$/"], "content": "never", "enabled": True}
             for n in range(30)]
    (tmp_path / "trap.json").write_text(json.dumps({"spec": "chara_card_v2", "data": {
        "name": "Mira", "first_mes": "Hello.", "character_book": {"entries": traps}}}))
    config = Path(write_config(tmp_path, llm, telegram))
    written = config.read_text()
    card_line = next(line for line in written.splitlines() if line.startswith("card = "))
    config.write_text(written.replace(card_line, f'card = "{tmp_path / "trap.json"}"'))
    process = await start_bot(str(config), telegram, tmp_path, log_level="INFO")
    try:
        llm.default = "ok"
        telegram.send(telegram.chat(ANN), telegram.user(ANN, "Ann"), "a" * 40 + "!")
        await asyncio.sleep(0.2)  # Ann's message is being matched against the 30 keys
        asked = time.monotonic()
        said = telegram.send(telegram.chat(BOB), telegram.user(BOB, "Bob"), "hello")
        await final_reply_to(telegram, BOB, said)
        assert time.monotonic() - asked < 2.0
    finally:
        log = await stop_bot(process)
    assert "took over 0.1 s to match and is skipped from now on" in log
