"""SPEC section 9, "untrusted input has a budget", measured on the real `python -m bot` process
over the fake Telegram Bot API: what one hostile file costs the process in memory (its peak
resident set, from /proc), and what the person is told."""

import asyncio
import struct
import zlib
from pathlib import Path

import pytest

from tests.conftest import offers_memory_tools, while_progressing
from tests.fakes.llm_server import text
from tests.process import answer_to, final_reply_to, start_bot, stop_bot, write_config

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
        await telegram.wait_for(lambda: any(str(call.get("chat_id")) == str(ANN)  # Ann's turn has begun
                                            for call in telegram.calls_to("sendChatAction")))
        # … and is still matching the 30 keys: nothing of it has reached the model yet
        assert not any("a" * 40 in str(m.get("content")) for r in llm.requests for m in r["messages"])
        asked = time.monotonic()
        said = telegram.send(telegram.chat(BOB), telegram.user(BOB, "Bob"), "hello")
        await final_reply_to(telegram, BOB, said)
        assert time.monotonic() - asked < 2.0
    finally:
        log = await stop_bot(process)
    assert "took over 0.1 s to match and is skipped from now on" in log


@pytest.mark.timeout(600)
async def test_an_outsider_meets_a_safe_bot(tmp_path, llm, telegram):
    config = write_config(tmp_path, llm, telegram)
    bot = await start_bot(config, telegram, tmp_path, log_level="INFO")
    try:
        ann, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
        bob, bob_dm = telegram.user(BOB, "Bob"), telegram.chat(BOB)

        # 1. Anonymous admins of two groups are nobody in particular: no memory passes between them.
        admin = telegram.anonymous_admin()
        group_a = telegram.chat(-1001, "supergroup", "Group A")
        group_b = telegram.chat(-1002, "supergroup", "Group B")
        llm.add(text("Noted."), text("I don't know you."))
        said = telegram.send(group_a, admin, "@mira_bot please remember that my salary is 99000 dollars",
                             sender_chat=group_a)
        await answer_to(telegram, group_a["id"], said)
        said = telegram.send(group_b, admin, "@mira_bot what do you know about me?", sender_chat=group_b)
        assert (await answer_to(telegram, group_b["id"], said)).text == "I don't know you."
        # nothing can be saved
        assert not offers_memory_tools(llm.requests[-2]) and not offers_memory_tools(llm.requests[-1])
        assert "99000" not in llm.prompt_text()
        said = telegram.send(group_b, admin, "/memory view", sender_chat=group_b)
        assert "Write as yourself" in (await answer_to(telegram, group_b["id"], said)).text

        # 2. /link: a code entered on the platform that made it is refused; wrong codes pause /link.
        said = telegram.send(bob_dm, bob, "/link")
        code = (await answer_to(telegram, BOB, said)).text.split("Your link code is ")[1].split(".")[0]
        said = telegram.send(ann_dm, ann, f"/link {code}")
        refused = await answer_to(telegram, ANN, said)
        assert "Enter it from your account on the other platform" in refused.text and not refused.buttons()
        for guess in ("AAAAAAAA", "BBBBBBBB", "CCCCCCCC", "DDDDDDDD", "EEEEEEEE"):
            said = telegram.send(ann_dm, ann, f"/link {guess}")
            await answer_to(telegram, ANN, said)
        said = telegram.send(ann_dm, ann, f"/link {code}")
        assert "/link is paused" in (await answer_to(telegram, ANN, said)).text

        # 5. Numbers that are not ASCII digits within range get the usage text.
        said = telegram.send(ann_dm, ann, "/memory add I grow tomatoes")
        await answer_to(telegram, ANN, said)
        for line, expected in (("/memory delete 99999999999999999999999", "is not a memory number"),
                               ("/memory view ²", "/memory view takes a scope"),
                               ("/memory edit ١٢ x", "is not a memory number")):
            said = telegram.send(ann_dm, ann, line)
            assert expected in (await answer_to(telegram, ANN, said)).text

        # 6. Forged button data is acknowledged: "This button no longer works".
        said = telegram.send(ann_dm, ann, "/memory view")
        view = await answer_to(telegram, ANN, said)
        answered = len(telegram.calls_to("answerCallbackQuery"))
        for forged in ("1:view:../../:1", "1:del:99999999999999999999999:all:1", "1:regen:x"):
            telegram.press(ann_dm, ann, view.message_id, forged)
        await telegram.wait_for(lambda: len(telegram.calls_to("answerCallbackQuery")) == answered + 3)
        assert {c.get("text") for c in telegram.calls_to("answerCallbackQuery")[answered:]} == \
            {"This button no longer works."}

        # 7. An edited command is never run again.
        said = telegram.send(ann_dm, ann, "/memory add I have a cat")
        await answer_to(telegram, ANN, said)
        telegram.edit(ann_dm, ann, said, "/memory add I have a dog")
        said = telegram.send(ann_dm, ann, "/memory view")
        listing = (await answer_to(telegram, ANN, said)).text
        assert "I have a cat" in listing and "I have a dog" not in listing

        # 8. A photo's caption is answered; a bare sticker gets one line.
        llm.add(text("I can't see it, but I'd love to hear about it."))
        said = telegram.send(ann_dm, ann, "what is in this picture?", photo=True)
        assert (await final_reply_to(telegram, ANN, said)).text == "I can't see it, but I'd love to hear about it."
        said = telegram.send(ann_dm, ann, "", sticker=True)
        assert (await answer_to(telegram, ANN, said)).text.startswith("I can't see a sticker")

        # 9. 30 new people, 6 DMs each, 20 ms apart: stored and answered in arrival order.
        llm.default = "ok"
        people, each = 30, 6
        before = len(llm.requests)
        for i in range(each):
            for n in range(people):
                telegram.send(telegram.chat(7000 + n), telegram.user(7000 + n, f"P{n}"), f"p{n} m{i}")
            await asyncio.sleep(0.02)
        await while_progressing(lambda: len(llm.requests), before + people * each)
        answered_order = [[m["content"] for m in r["messages"] if m["role"] == "user"]
                          for r in llm.requests[before:]]
        for n in range(people):
            mine = [window for window in answered_order if window[-1].startswith(f"p{n} ")]
            assert [w[-1] for w in mine] == [f"p{n} m{i}" for i in range(each)]  # answered in order
            assert mine[-1] == [f"p{n} m{i}" for i in range(each)]  # and stored in order
    finally:
        await stop_bot(bot)
