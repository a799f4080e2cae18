"""SPEC 18, tools, as a person meets them: the real `python -m bot` process on Telegram and on
Discord, with `[tools]` as SPEC 10 writes it — a fake SearXNG on loopback, a real MCP server made
with the `mcp` SDK on loopback, pages on loopback reached through the safe egress (the process is
handed a resolver of test names: tests/process.py). The model is the scripted server, answering
like a model that uses its tools: it calls one for the person's words, then says what came back."""

import asyncio
import json

import pytest

from tests.fakes.discord_server import FakeDiscord
from tests.fakes.llm_server import Step, text, tool_calls
from tests.fakes.mcp_notes import NotesServer
from tests.fakes.searxng import FakeSearXNG
from tests.fakes.web_pages import PUBLIC, FakeWeb
from tests.process import bot_running, final_reply_to, mira_config

ANN = 811
DISCORD_ANN = FakeDiscord.user("900000000000000031", "Ann")
DISCORD_ANN_DM = "910000000000000031"
PAGE = """<html><head><title>Harbour news</title></head><body><article><h1>The lighthouse reopens</h1>
<p>The Kermorvan lighthouse reopens to visitors on Saturday after two years of repairs.</p>
<p>Guided climbs of its 120 steps start at ten and run every hour until dusk.</p></article></body></html>"""


def using_tools(request: dict) -> Step | None:
    """A model that uses its tools: for the person's words a tool call, then an answer made of
    what the tool said."""
    messages = request["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        said = last["content"]
        if said.startswith("{") and "rolls" in said:
            rolled = json.loads(said)
            return text(f"The dice show {rolled['rolls']}: {rolled['total']} in all.")
        body = said.split("\n")[2:-1] if said.startswith("Untrusted") else [said]
        return text("Here is what I found: " + " ".join(body)[:300])
    words = last["content"] if isinstance(last["content"], str) else ""
    if "roll" in words:
        return tool_calls(("dice", {"notation": "2d6"}))
    if "http://" in words:
        return tool_calls(("read", {"url": words[words.index("http://"):].split()[0]}))
    if "tide" in words:
        return tool_calls(("search", {"query": "high tide Brest"}))
    if "notes" in words:
        return tool_calls(("lookup", {"topic": "ferry"}))
    return None


@pytest.fixture
async def outside():
    """The SearXNG, MCP server and web pages the tools reach, all on loopback."""
    searxng, notes, web = FakeSearXNG(), NotesServer(), FakeWeb()
    searxng.answer("high tide Brest", ("Tides in Brest", "http://tides.example/brest",
                                      "High tide in Brest today at 18:12, 6.9 m."))
    web.page("/lighthouse", PAGE)
    for server in (searxng, notes, web):
        await server.start()
    yield searxng, notes, web
    for server in (searxng, notes, web):
        await server.stop()


def config(llm, searxng, notes, *, telegram=None) -> str:
    return mira_config(llm, f"""[tools]
enabled = ["dice", "time", "search", "read"]
show = true
[tools.search]
url = "{searxng.url}"
[[tools.mcp]]
name = "notes"
url = "{notes.url}"
tools = ["lookup"]""", telegram=telegram)


def web_env(web: FakeWeb) -> dict[str, str]:
    return {"KEEPSAKE_TEST_WEB": f"news.example={PUBLIC};{web.port}"}


@pytest.mark.timeout(120)
async def test_dice_search_a_linked_page_and_an_mcp_tool_through_the_real_process_on_telegram(
        tmp_path, llm, telegram, outside):
    searxng, notes, web = outside
    llm.responder = using_tools
    async with bot_running(tmp_path, config(llm, searxng, notes, telegram=telegram),
                           MIRA_TELEGRAM_TOKEN=telegram.token, **web_env(web)):
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        ann, dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)

        reply = await final_reply_to(telegram, ANN, telegram.send(dm, ann, "roll 2d6 for me"))
        rolled = json.loads(next(m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"))
        assert reply.text == (f"The dice show {rolled['rolls']}: {rolled['total']} in all.\n\n"
                              f"🎲 2d6 → {rolled['total']}")  # the line under the reply names the roll

        reply = await final_reply_to(telegram, ANN, telegram.send(dm, ann, "when is high tide in Brest?"))
        assert searxng.queries == ["high tide Brest"]
        assert "High tide in Brest today at 18:12" in reply.text
        assert reply.text.endswith("\n\n🔎 searched: high tide Brest")

        reply = await final_reply_to(telegram, ANN, telegram.send(
            dm, ann, "what does this say? http://news.example/lighthouse"))
        assert web.got == ["/lighthouse"]
        assert "reopens to visitors on Saturday" in reply.text and reply.text.endswith("📖 read: news.example")

        reply = await final_reply_to(telegram, ANN, telegram.send(dm, ann, "check the harbour notes for me"))
        assert notes.calls == [("lookup", {"topic": "ferry"})]  # called with its tool's arguments
        assert "The ferry to Ouessant leaves at 09:30" in reply.text and reply.text.endswith("🧰 notes: lookup")
        offered = [spec["function"]["name"] for spec in llm.requests[-2]["tools"]]  # the round that called it
        assert "lookup" in offered and "wipe" not in offered  # only the tools the owner named


@pytest.mark.timeout(120)
async def test_dice_search_a_linked_page_and_an_mcp_tool_through_the_real_process_on_discord(
        tmp_path, llm, discord_fake, outside):
    searxng, notes, web = outside
    llm.responder = using_tools
    async with bot_running(tmp_path, config(llm, searxng, notes), MIRA_DISCORD_TOKEN="discord-token-18",
                           KEEPSAKE_TEST_DISCORD_BASE=discord_fake.base, **web_env(web)):
        await asyncio.wait_for(discord_fake.identified.wait(), 30)
        await discord_fake.wait_for(lambda: discord_fake.commands, timeout=30)

        def from_bot():
            return [m for m in discord_fake.in_channel(DISCORD_ANN_DM) if m.author_id == discord_fake.app_id]

        await discord_fake.say(DISCORD_ANN_DM, DISCORD_ANN, "roll 2d6 for me", guild=False)
        reply, = await discord_fake.wait_for(lambda: (found := from_bot()) and found[-1].buttons() and found,
                                             timeout=30)
        rolled = json.loads(next(m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"))
        assert reply.content == (f"The dice show {rolled['rolls']}: {rolled['total']} in all.\n\n"
                                 f"-# 🎲 2d6 → {rolled['total']}")  # Discord's small text

        async def answered(words: str):
            before = len(from_bot())
            await discord_fake.say(DISCORD_ANN_DM, DISCORD_ANN, words, guild=False)
            return (await discord_fake.wait_for(
                lambda: (found := from_bot())[before:] and found[-1].buttons() and found, timeout=30))[-1]

        reply = await answered("when is high tide in Brest?")
        assert searxng.queries == ["high tide Brest"] and "High tide in Brest today at 18:12" in reply.content
        assert reply.content.endswith("\n\n-# 🔎 searched: high tide Brest")
        reply = await answered("what does this say? http://news.example/lighthouse")
        assert web.got == ["/lighthouse"] and "reopens to visitors on Saturday" in reply.content
        reply = await answered("check the harbour notes for me")
        assert notes.calls == [("lookup", {"topic": "ferry"})]
        assert "The ferry to Ouessant leaves at 09:30" in reply.content
