"""SPEC 17 as people meet it: the real `python -m bot` process, a config in the format of SPEC
section 10, the fake Telegram Bot API and the fake Discord — personas only in their owner's
turns, an age-restricted character silent outside age-restricted places with no model call,
/usage, and /stats refused to anyone but `[owner] ids`. (Budgets across two processes on
PostgreSQL: tests/test_budgets_and_age.py.)"""

import asyncio

import pytest

from bot.commands.usage import NOT_OWNER
from bot.contract import PLATFORM_TRAITS
from tests.conftest import ROOT
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.llm_server import text
from tests.process import answer_to, bot_running, final_reply_to, llm_table, logged

ANN, BOB, OWNER = 901, 902, 903
SAILOR = "I'm Ann, a sailor with a scar over one eye."
DISCORD_ANN = FakeDiscord.user("900000000000000031", "Ann")
DISCORD_ANN_DM = "910000000000000031"


def config(llm, *, telegram=None, discord_fake=None, extra: str = "", character: str = "") -> str:
    platforms = f'\n[telegram]\nbase_url = "{telegram.base_url}"\n{extra}' if telegram is not None else extra
    tokens = ('telegram_token_env = "MIRA_TELEGRAM_TOKEN"\n' if telegram is not None else "") + \
        ('discord_token_env = "MIRA_DISCORD_TOKEN"\n' if discord_fake is not None else "")
    return (llm_table(llm) + "max_retries = 0\n\n[storage]\nurl = \"sqlite:///keepsake.sqlite3\"\n"
            f"\n[limits]\ntokens_per_day = 100000\n\n[owner]\nids = [\"telegram:{OWNER}\"]\n" + platforms +
            f'\n[[characters]]\nname = "Mira"\ncard = "{ROOT / "characters" / "mira.json"}"\n' + tokens + character)


@pytest.mark.timeout(120)
async def test_on_telegram_a_persona_reaches_only_its_owners_turns_and_stats_is_the_owners(tmp_path, llm, telegram):
    host = '\n[discord]\nhost_token_env = "KEEPSAKE_TEST_NO_HOST"\n'  # named, but not set
    no_discord = 'discord_token_env = "KEEPSAKE_TEST_NO_DISCORD"\n'  # named, but not set
    async with bot_running(tmp_path, config(llm, telegram=telegram, extra=host, character=no_discord),
                           MIRA_TELEGRAM_TOKEN=telegram.token) as process:
        # Start-up says what would otherwise fail in silence (#36, #47): a token variable that is
        # not set, the unset host bot variable, and a bot in privacy mode (the fake's getMe says
        # can_read_all_group_messages false).
        unset = await logged(process, "KEEPSAKE_TEST_NO_DISCORD")
        assert "WARNING" in unset and "Mira: KEEPSAKE_TEST_NO_DISCORD (characters[0].discord_token_env) is not set, " \
            "so Mira is not on Discord" in unset
        assert "KEEPSAKE_TEST_NO_HOST" in await logged(process, "host_token_env names")
        assert "BotFather → /setprivacy" in await logged(process, "is in privacy mode")
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        ann, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
        # The card's greeting shows its *action* in italics, as replies do (#36 item 10).
        await answer_to(telegram, ANN, telegram.send(ann_dm, ann, "/start"))
        greeting = telegram.calls_to("sendMessage")[-1]
        assert greeting["parse_mode"] == "HTML" and greeting["text"].startswith("<i>Mira looks up from the logbook.</i>")
        bob, bob_dm = telegram.user(BOB, "Bob"), telegram.chat(BOB)
        set_line = await answer_to(telegram, ANN, telegram.send(ann_dm, ann, f"/persona set {SAILOR}"))
        assert SAILOR in set_line.text
        await final_reply_to(telegram, ANN, telegram.send(ann_dm, ann, "hello"))
        assert SAILOR in llm.prompt_text()
        await final_reply_to(telegram, BOB, telegram.send(bob_dm, bob, "hello"))
        assert SAILOR not in llm.prompt_text()

        # what each turn cost, as the model server reported it: Ann's hello, then Bob's
        ann_spent, bob_spent = (u["prompt_tokens"] + u["completion_tokens"] for u in llm.usages)
        usage = await answer_to(telegram, ANN, telegram.send(ann_dm, ann, "/usage"))
        assert usage.text == f"Your tokens today: {ann_spent:,} of 100,000 a day.\nThis month: {ann_spent:,}."
        refused = await answer_to(telegram, BOB, telegram.send(bob_dm, bob, "/stats"))
        assert refused.text == NOT_OWNER
        owner, owner_dm = telegram.user(OWNER, "Olga"), telegram.chat(OWNER)
        stats = await answer_to(telegram, OWNER, telegram.send(owner_dm, owner, "/stats"))
        assert stats.text.startswith("Today (") and ": 2 turns, " in stats.text and "2 people" in stats.text
        spenders = sorted([("Ann", ann_spent), ("Bob", bob_spent)], key=lambda spent: -spent[1])
        assert stats.text.endswith("Who spent most in the last 7 days: " + "; ".join(
            f"{n}. {name} — {tokens:,} tokens" for n, (name, tokens) in enumerate(spenders, 1)))


@pytest.mark.timeout(120)
async def test_on_telegram_an_age_restricted_character_answers_only_with_allow_nsfw(tmp_path, llm, telegram):
    ann, ann_dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
    async with bot_running(tmp_path, config(llm, telegram=telegram, character="nsfw = true\n"),
                           MIRA_TELEGRAM_TOKEN=telegram.token) as process:
        assert "Mira" in await logged(process, "age-restricted characters")  # said at start-up
        nowhere = await logged(process, "will answer no one on Telegram")  # in plain words, with the key (#47)
        assert "WARNING" in nowhere and "set [telegram] allow_nsfw = true" in nowhere
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        line = await answer_to(telegram, ANN, telegram.send(ann_dm, ann, "hello"))
        assert line.text == PLATFORM_TRAITS["telegram"].age_line.format(name="Mira")
        assert llm.requests == []
    polls = len(telegram.calls_to("getUpdates"))
    async with bot_running(tmp_path, config(llm, telegram=telegram, extra="allow_nsfw = true\n",
                                            character="nsfw = true\n"), MIRA_TELEGRAM_TOKEN=telegram.token):
        await telegram.wait_for(lambda: len(telegram.calls_to("getUpdates")) > polls, timeout=30)
        llm.add(text("Welcome back."))
        reply = await final_reply_to(telegram, ANN, telegram.send(ann_dm, ann, "hello again"))
        assert reply.text == "Welcome back." and len(llm.requests) == 1


@pytest.mark.timeout(120)
async def test_on_discord_an_age_restricted_character_is_silent_outside_age_restricted_channels(
        tmp_path, llm, discord_fake):
    async with bot_running(tmp_path, config(llm, discord_fake=discord_fake, character="nsfw = true\n"),
                           MIRA_DISCORD_TOKEN="discord-token-17", KEEPSAKE_TEST_DISCORD_BASE=discord_fake.base):
        await asyncio.wait_for(discord_fake.identified.wait(), 30)
        await discord_fake.wait_for(lambda: discord_fake.commands, timeout=30)

        def from_bot(channel_id: str):
            return [m for m in discord_fake.in_channel(channel_id)
                    if m.author_id == discord_fake.app_id and m.interaction_token is None]  # not a command's answer

        why = PLATFORM_TRAITS["discord"].age_line.format(name="Mira")
        await discord_fake.say(discord_fake.channel_id, DISCORD_ANN, "hello", mention_bot=True)
        line, = await discord_fake.wait_for(lambda: from_bot(discord_fake.channel_id), timeout=30)
        await discord_fake.say(DISCORD_ANN_DM, DISCORD_ANN, "hello", guild=False)
        dm_line, = await discord_fake.wait_for(lambda: from_bot(DISCORD_ANN_DM), timeout=30)
        assert line.content == why and llm.requests == []
        assert dm_line.content == PLATFORM_TRAITS["discord"].age_line_private.format(name="Mira")  # a DM is not a channel (#47)

        # A persona set by slash command reaches her turn in the age-restricted channel.
        interaction = await discord_fake.slash(DISCORD_ANN, discord_fake.age_restricted_id, "persona", "set",
                                               text=SAILOR)
        await discord_fake.wait_for(lambda: [m for m in discord_fake.for_interaction(interaction) if m.content],
                                    timeout=30)
        llm.add(text("Evening, sailor."))
        await discord_fake.say(discord_fake.age_restricted_id, DISCORD_ANN, "hello", mention_bot=True)
        reply, = await discord_fake.wait_for(lambda: (found := from_bot(discord_fake.age_restricted_id))
                                             and found[-1].buttons() and found, timeout=30)  # streamed whole
        assert reply.content == "Evening, sailor." and len(llm.requests) == 1 and SAILOR in llm.prompt_text()

        # A thread of the age-restricted channel is age-restricted too (it answers for its parent).
        thread = discord_fake.thread(discord_fake.age_restricted_id)
        await discord_fake.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        llm.add(text("Quiet in here, sailor."))
        await discord_fake.say(thread["id"], DISCORD_ANN, "a side room?", mention_bot=True)
        in_thread, = await discord_fake.wait_for(lambda: (found := from_bot(thread["id"])) and found[-1].buttons()
                                                 and found, timeout=30)  # streamed whole, not its first piece
        assert in_thread.content == "Quiet in here, sailor." and len(llm.requests) == 2
