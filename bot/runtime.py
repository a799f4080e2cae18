"""The container: everything the running bot is made of, built once, by constructor injection,
for the bot and the console alike — store, token counter, characters, LLM, summarizer, turn
handler, rebuilds, the /memory service, background jobs and notifications.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

from bot.access import Asker
from bot.characters import CharacterRuntime, load_character
from bot.commands import MemoryCommands
from bot.config import Config
from bot.contract import Notifier
from bot.limits import CallLimits
from bot.llm import LLMClient
from bot.prompt import system_prompt
from bot.rebuild import Rebuilds
from bot.saved_memories import CAPS
from bot.scheduler import BackgroundJobs
from bot.semantic import SemanticRecall
from bot.summaries import Summarizer
from bot.tokens import TokenCounter
from bot.recall import recall_budget
from bot.turn import TurnHandler
from storage.factory import open_store
from storage.ports import Store

log = logging.getLogger(__name__)


class Notifications:
    """Tells people about background results (a rebuild finished) through the adapters that are
    running; each adapter ignores conversations of other platforms."""

    def __init__(self, store: Store):
        self.store = store
        self._notifiers: list[Notifier] = []

    async def notify(self, conversation_id: int, person_id: int | None, text: str) -> None:
        conversation = await self.store.conversations.conversation_by_id(conversation_id)
        if conversation is None:
            return
        for notifier in list(self._notifiers):
            await notifier(conversation, person_id, text)

    def __len__(self) -> int:
        """How many adapters listen now."""
        return len(self._notifiers)

    @contextlib.contextmanager
    def listening(self, notifier: Notifier) -> Iterator[None]:
        """Deliver notifications to `notifier` while the block runs (an adapter's lifetime)."""
        self._notifiers.append(notifier)
        try:
            yield
        finally:
            self._notifiers.remove(notifier)


@dataclass
class Runtime:
    config: Config
    store: Store
    llm: LLMClient
    counter: TokenCounter
    turns: TurnHandler
    summarizer: Summarizer
    rebuilds: Rebuilds
    commands: MemoryCommands
    jobs: BackgroundJobs
    notifications: Notifications

    def listening(self, notifier: Notifier) -> contextlib.AbstractContextManager[None]:
        return self.notifications.listening(notifier)

    def lets_in(self, character: str, asker: Asker) -> bool:
        """[access]: whether both the global rules and the character's own let `asker` in."""
        allowed = self.config.access.lets_in(asker) and self.config.character(character).access.lets_in(asker)
        if not allowed:
            log.info("%s: %s:%s in %s is not let in by [access]; nothing of theirs is stored",
                     character, asker.platform, asker.user_id or "(a chat)", ", ".join(asker.places) or "-")
        return allowed

    def rules_name_roles(self, character: str) -> bool:
        """Whether an [access] rule for this character names a Discord role."""
        return self.config.access.names_roles or self.config.character(character).access.names_roles

    async def first_delivery(self, update_key: str) -> bool:
        """True the first time any process sees this platform update (SPEC 9: an update
        delivered twice is answered once)."""
        return await self.store.coordination.first_delivery(update_key)

    def start(self) -> None:
        """Start the background jobs (inside the running event loop)."""
        self.jobs.start()

    async def close(self) -> None:
        await self.jobs.stop()
        if self.turns.semantic is not None:
            await self.turns.semantic.stop()
        await self.rebuilds.stop()
        await self.summarizer.stop()
        await self.llm.close()
        await self.store.close()


async def build_runtime(config: Config, clock: Callable[[], float] = time.time,
                        llm_http_client: Any = None) -> Runtime:
    # Characters load first: a malformed card stops start-up before anything is opened.
    loaded = [(c.name, load_character(c)) for c in config.characters]
    store = await open_store(config.storage.url, CAPS, config.storage.base, clock, config.storage.password)
    recovered = await store.turns.recover_interrupted_turns()
    if recovered:
        log.warning("%d turn(s) were interrupted by a stop; their memory writes were undone, and each "
                    "platform answers them again or marks their partial reply", recovered)
    counter = TokenCounter(config.llm.model)
    characters = {}
    for name, character in loaded:
        character = replace(character, lorebook=character.lorebook.counted(counter.count))
        character_id = await store.characters.ensure_character(name)
        prompt_tokens = counter.count(system_prompt(character, "someone", tools=True))
        characters[name] = CharacterRuntime(character, character_id, prompt_tokens)
    llm = LLMClient(config.llm, http_client=llm_http_client)
    window = config.llm.context_window
    summarizer = Summarizer(store, llm, counter, {rt.id: rt for rt in characters.values()}, window, clock=clock)
    recall_tokens = recall_budget(config.recall.budget_tokens, window) if config.recall.enabled else 0
    semantic = None
    if config.recall.enabled and config.recall.embedding_model:
        semantic = SemanticRecall(store, llm, counter, config.recall.embedding_model)
        if not await semantic.start():
            semantic = None
    turns = TurnHandler(store, llm, counter, characters, window, after_delivery=summarizer.schedule, clock=clock,
                        recall_tokens=recall_tokens, limits=CallLimits(store, config.limits.turns_per_minute),
                        semantic=semantic)
    notifications = Notifications(store)
    rebuilds = Rebuilds(store, summarizer, notifications.notify)
    commands = MemoryCommands(turns, rebuilds, clock=clock)
    jobs = BackgroundJobs(store, summarizer, rebuilds, config.storage, clock=clock, semantic=semantic)
    return Runtime(config, store, llm, counter, turns, summarizer, rebuilds, commands, jobs, notifications)
