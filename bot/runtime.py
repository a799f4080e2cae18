"""The container: everything the running bot is made of, built once, by constructor injection,
for the bot and the console alike — store, token counter, characters, LLM, summarizer, turn
handler, rebuilds, the /memory service, background jobs and notifications.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from bot.access.budgets import Budgets
from bot.access.gate import Gate, PictureQuota
from bot.access.limits import CallLimits
from bot.characters.cards import Character, StoredCharacter, load_character
from bot.characters.cast import Cast
from bot.commands.router import CommandRouter
from bot.config import Config
from bot.contract import Core
from bot.core import Notifications, build_core
from bot.memory.rebuild import Rebuilds
from bot.memory.recall import recall_budget
from bot.memory.saved_memories import CAPS
from bot.memory.semantic import SemanticRecall
from bot.memory.summaries import Summarizer
from bot.memory.tools import memory_tools
from bot.memory.witnesses import Witnesses
from bot.model.llm import LLMClient
from bot.model.tokens import TokenCounter
from bot.page.desk import PageDesk
from bot.scenes import Scenes
from bot.scheduler import BackgroundJobs
from bot.tools.egress import Egress
from bot.tools.outside import Outside
from bot.tools.setup import allowed_tools, configured_tools
from bot.tools.toolbox import Tool, Toolbox, guidance_of
from bot.turn.handler import TurnHandler
from bot.turn.prompt import character_tokens
from bot.voice.client import VoiceClient
from bot.voice.listening import Listening
from bot.voice.speaking import Speaking, speaks
from bot.writing_first.checkins import CheckIns, counted_from
from bot.writing_first.outbox import Delivered, Outbox
from bot.writing_first.reminders import RemindersDue
from storage.factory import open_store
from storage.ports import Store

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    config: Config
    store: Store
    llm: LLMClient
    counter: TokenCounter
    cast: Cast
    turns: TurnHandler
    summarizer: Summarizer
    rebuilds: Rebuilds
    commands: CommandRouter
    jobs: BackgroundJobs
    notifications: Notifications
    checkins: CheckIns
    scenes: Scenes
    gate: Gate
    core: Core  # what adapters get (bot/contract.py)
    voice: VoiceClient | None = None  # [voice] (SPEC 16)
    listening: Listening | None = None  # voice notes heard (SPEC 16)
    speaking: Speaking | None = None  # replies spoken (SPEC 16)
    semantic: SemanticRecall | None = None  # recall by meaning ([recall] embedding_model)
    reminders: RemindersDue | None = None  # reminders sent when due (SPEC 19)
    outside: Outside | None = None  # the one client of the tools' outside calls (SPEC 18)

    def start(self) -> None:
        """Start the background jobs (inside the running event loop)."""
        self.jobs.start()

    def abandon_in_flight(self) -> None:
        """Stopping: voice notes being heard, replies being spoken (SPEC 16) and the tools' outside
        calls (SPEC 18) are given up at once, so a hanging server never holds up the exit; a note
        stays kept as its placeholder, and a turn whose tool was waiting is answered after the restart."""
        for audio in (self.listening, self.speaking):
            if audio is not None:
                audio.in_flight.abandon()
        if self.outside is not None:
            self.outside.abandon()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *failure: object) -> None:
        """Closed however the block ends: the store's threads outlive an unclosed runtime and keep
        the process from exiting, so a start-up that fails would hang instead of stopping."""
        await self.close()

    async def close(self) -> None:
        self.abandon_in_flight()
        await self.jobs.stop()
        await self.scenes.stop()
        if self.semantic is not None:
            await self.semantic.stop()
        await self.rebuilds.stop()
        await self.summarizer.stop()
        await self.llm.close()
        if self.voice is not None:
            await self.voice.close()
        await self.store.close()


async def build_runtime(config: Config, clock: Callable[[], float] = time.time,
                        llm_http_client: Any = None, tools: Sequence[Tool] = (), egress: Egress | None = None,
                        platforms: dict[str, str] | None = None) -> Runtime:
    """Everything a process runs, built once. `tools`: more tools every character may use,
    besides the memory tools and the configured ones (SPEC 18; a test's own tool goes here);
    `egress`: how `read` reaches pages (a test's resolver and dialling; else the system's; its
    outside client is the process's);
    `platforms`: where each character runs, as the owner's page says it ("Discord, Telegram")."""
    # Characters load first: a malformed card stops start-up before anything is opened.
    loaded = [(c.name, load_character(c)) for c in config.characters]
    store = await open_store(config.storage.url, CAPS, config.storage.base, clock, config.storage.password,
                             config.storage.backup_dir)
    try:
        return await _assembled(config, store, loaded, clock, llm_http_client, tools, egress, platforms)
    except BaseException:
        await store.close()  # its threads would keep the process from exiting on the error
        raise


async def _assembled(config: Config, store: Store, loaded: list[tuple[str, Character]], clock: Callable[[], float],
                     llm_http_client: Any, tools: Sequence[Tool], egress: Egress | None,
                     platforms: dict[str, str] | None) -> Runtime:
    """The runtime's parts around an open store (build_runtime)."""
    recovered = await store.turns.recover_interrupted_turns()
    if recovered:
        log.warning("%d turn(s) were interrupted by a stop; their memory writes were undone, and each "
                    "platform answers them again or marks their partial reply", recovered)
    counter = TokenCounter(config.llm.model)
    budgets = Budgets(store.usage, config.limits.tokens_per_day, config.limits.zone, clock)
    remembering = memory_tools(store.memories, counter)
    # the toolbox's residents (bot/tools/), and what each character may use of them
    outside = egress.outside if egress is not None else Outside()
    age_restricted = frozenset(name for name, character in loaded if character.nsfw)
    pictures = PictureQuota(config.pictures.per_day, config.pictures.tokens_each) if config.pictures else None
    gate = Gate(store.coordination, store.usage, config.access, {c.name: c.access for c in config.characters},
                CallLimits(store.coordination, config.limits.turns_per_minute), budgets,
                age_restricted=age_restricted, pictures=pictures)
    configured = await configured_tools(config, store, gate.give_back_picture, outside, egress,
                                        taken=[tool.name for tool in remembering], age_restricted=age_restricted)
    everything = [*remembering, *configured.tools, *tools]
    allowed = allowed_tools(config, remembering)
    characters = {}
    for name, character in loaded:
        character = replace(character, lorebook=character.lorebook.counted(counter.count))
        character_id = await store.characters.ensure_character(name)
        own = allowed.get(name.casefold())
        usable = [tool for tool in everything if own is None or tool.name in own]
        prompt_tokens = character_tokens(character, guidance_of(usable), counter.count)
        characters[name] = StoredCharacter(character, character_id, prompt_tokens)
    llm = LLMClient(config.llm, http_client=llm_http_client)
    window = config.llm.context_window
    # the window a summary leaves to the turns is the turns' own, as they learn what the server holds
    summarizer = Summarizer(store, llm, counter, {rt.id: rt for rt in characters.values()},
                            lambda: turns.context_window, clock=clock)
    recall_tokens = recall_budget(config.recall.budget_tokens, window) if config.recall.enabled else 0
    semantic = None
    if config.recall.enabled and config.recall.embedding_model:
        embedding_server = config.recall.embedding_llm(config.llm)
        # A server of its own is reached over the network, even where the chat model is in process.
        embeddings = llm if embedding_server == config.llm else LLMClient(embedding_server)
        semantic = SemanticRecall(store.vectors, embeddings, counter, config.recall.embedding_model)
        if not await semantic.start():
            semantic = None
    if gate.age_restricted:
        log.info("age-restricted characters (they talk only in age-restricted Discord channels, in Discord DMs "
                 "with [discord] nsfw_in_dms = true, and on Telegram with [telegram] allow_nsfw = true): %s",
                 ", ".join(name for name, character in loaded if character.nsfw))
    cast = Cast(store.conversations, store.people, characters)
    voice, listening = None, None  # voice notes are read as text only without [voice]
    if config.voice is not None:
        voice = VoiceClient(config.voice, config.llm, http_client=llm_http_client)
        listening = Listening(voice, config.voice.max_seconds)
    toolbox = Toolbox(everything, gate.tool_refusal, counter, allowed, show=config.tools.show,
                      zone=config.limits.timezone)
    late_servers = None
    if configured.silent:  # an MCP server's tools join the toolbox once it answers (the SDK is loaded already)
        from bot.tools.mcp_servers import LateServers

        late_servers = LateServers(configured.silent, outside, configured.names, toolbox.add)
    speaking = Speaking(voice) if voice is not None and speaks(config.voice, True) else None
    scenes = Scenes(store.conversations, store.turns, cast, gate, config.scenes.max_chain)
    turns = TurnHandler(store, llm, counter, cast, window, gate, counted_from, clock=clock, recall_tokens=recall_tokens,
                        semantic=semantic, listening=listening,
                        speaks=lambda spoken_to: speaks(config.voice, spoken_to), toolbox=toolbox,
                        speaking=speaking,
                        voices={c.name: c.voice for c in config.characters},
                        witnesses=Witnesses(store, cast, scenes.may_witness))
    notifications = Notifications(store, cast)
    rebuilds = Rebuilds(store, summarizer, notifications.notify, gate.spend)
    # what follows a message shown, a reply's and a letter's (bot/writing_first/outbox.py)
    delivered = Delivered(store, after_delivery=summarizer.schedule)
    outbox = Outbox(store, cast, gate, delivered)  # what a character writes first goes out one way
    checkins = CheckIns(store, cast, gate, budgets, llm, counter, window,
                        {c.name: c.checkins for c in config.characters if c.checkins},
                        outbox, clock=clock, zone=config.limits.timezone)
    reminders = RemindersDue(store, cast, gate, llm, counter, window, outbox, checkins.writers,
                             config.reminders.grace_hours, clock=clock)
    commands = CommandRouter(store, cast, counter, llm, gate, budgets, rebuilds, scenes.may_witness, clock=clock,
                              writes_first=checkins.writes_first, owners=frozenset(config.owner.ids),
                              default_zone=config.limits.timezone,
                              page_address=config.web.address if config.web is not None else None,
                              pictures_a_day=config.pictures.per_day if config.pictures is not None else None)
    jobs = BackgroundJobs(store, summarizer, rebuilds, config.storage, clock=clock, semantic=semantic,
                          checkins=checkins, reminders=reminders, late_servers=late_servers)
    page = PageDesk(store, cast, commands.door, budgets, commands.memories, commands.persona, commands.reminders,
                    commands.usage, commands.account, platforms or {}, clock, gate)
    core = build_core(store, cast, counter, turns, gate, commands, notifications, checkins, scenes,
                      delivered, page, clock=clock)
    return Runtime(config, store, llm, counter, cast, turns, summarizer, rebuilds, commands, jobs, notifications,
                   checkins, scenes, gate, core, voice, listening, speaking, semantic, reminders, outside)
