"""Scenes (SPEC 15): the characters of a deployment in one shared chat play one scene — one
conversation (storage keeps one per shared chat), in which every message names its speaker.

- **Who answers** a person's message (`answerer`): the character it is addressed to (a mention,
  a reply, its name); in an always-on channel, a message addressed to no one is answered by one
  character the person may reach (the gate, bot/access/gate.py), drawn by its card's
  `extensions.talkativeness` (default 0.5), never the one that spoke last while another can.
- **The chain** (`after_reply`): a character's reply that names another character of the scene
  is answered by it, at most `[scenes] max_chain` (≤ 10) character messages in a row, on behalf
  of the person whose message started the chain: it needs their `[access]` to that character
  and takes a model call from their `[limits]`. A person's message ends the chain (a queued
  answer finds it and sends nothing), and so does one addressed to no character (`heard`).
- A character speaks through its **voice**: the adapter of this process that runs it on the
  platform (its own bot account). The characters of a scene are those with a voice on the
  chat's platform in this process.
Turns of a scene wait in the scene's one line (storage), so no message is answered by two
characters at once, in any process.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import replace

from bot.access.gate import CHOOSING, MODEL_CALL, Gate
from bot.characters.cast import Cast
from bot.contract import Asker, ConversationKey, IncomingMessage, QueuedTurn, Voice, where_named
from bot.present import Present
from bot.text import CHAIN_ENDED
from storage.ports import Conversations, MessageRow, TurnRow, Turns

log = logging.getLogger(__name__)


def named(text: str, names: list[str]) -> str | None:
    """The character a text addresses by name: of those it names as a whole word (any case),
    the one named first."""
    found = [(at, name) for name in names if (at := where_named(text, name)) is not None]
    return min(found)[1] if found else None


def drawn_by_talkativeness(talkativeness: dict[str, float], last_speaker: str | None, rng: random.Random) -> str:
    """One character, drawn with odds in proportion to its talkativeness; the one that spoke last
    is left out while another can speak (all silent ones: any, evenly)."""
    pool = {name: odds for name, odds in talkativeness.items()
            if last_speaker is None or name.casefold() != last_speaker.casefold()} or talkativeness
    names = list(pool)
    if not any(pool.values()):
        return rng.choice(names)
    return rng.choices(names, weights=[pool[name] for name in names])[0]


def characters_in_a_row(newest_first: list[MessageRow]) -> int:
    """How many character messages end the conversation, since the last person's message."""
    count = 0
    for row in newest_first:
        if row.role == "user":
            break
        count += 1
    return count


class Scenes:
    def __init__(self, conversations: Conversations, turns: Turns, cast: Cast, gate: Gate, max_chain: int,
                 rng: random.Random | None = None):
        self.conversations = conversations
        self.turns = turns
        self.cast = cast
        self.gate = gate
        self.max_chain = max_chain
        self.rng = rng or random.Random()
        self.voices: Present[Voice] = Present()
        self._chains: set[asyncio.Task] = set()  # chain turns being answered (kept from the collector)

    def voice(self, platform: str, character: str) -> Voice | None:
        return next((v for v in self.voices if v.platform == platform
                     and v.character_name.casefold() == character.casefold()), None)

    def present(self, platform: str) -> list[str]:
        """The characters that can speak in a scene on this platform (in config order)."""
        voiced = {v.character_name.casefold() for v in self.voices if v.platform == platform}
        return [s.character.name for s in self.cast.characters.values() if s.character.name.casefold() in voiced]

    async def can_speak(self, key: ConversationKey, character: str) -> bool:
        """Whether this character's voice can post in the chat (SPEC 15: only those take part)."""
        voice = self.voice(key.platform, character)
        return voice is not None and await voice.can_speak(replace(key, character=voice.character_name))

    async def may_witness(self, key: ConversationKey, character: str) -> bool:
        """Whether the character can be present in the chat (SPEC 22): its voice in this process
        says whether it can speak there (Telegram: its bot is a member); one voiced elsewhere may."""
        return self.voice(key.platform, character) is None or await self.can_speak(key, character)

    async def answerer(self, message: IncomingMessage) -> str:
        """Who answers a person's message in a shared chat."""
        key = message.conversation
        present = self.present(key.platform)
        if message.addressed or len(present) < 2:  # addressed, or nobody else to choose
            return key.character
        if by_name := named(message.text, present):
            return by_name
        present = [name for name in present if (await self.gate.admit(CHOOSING, name, message.asker)).admitted
                   and await self.can_speak(key, name)] or [key.character]
        conversation = await self.cast.conversation_for(key)
        last = await self.conversations.recent_messages(conversation.id, 1)
        said_last = self.cast.stored_by_id(last[0].character_id) if last and last[0].role == "assistant" else None
        last_speaker = said_last.character.name if said_last is not None else None
        return drawn_by_talkativeness({name: self.cast.character(name).character.talkativeness for name in present},
                                      last_speaker, self.rng)

    async def heard(self, key: ConversationKey) -> None:
        """A person wrote in a shared chat without addressing any character: a chain there ends.
        A scene is a chat where several characters take part, however many bot accounts (or
        one host bot) voice them (#54)."""
        if self.max_chain and len(self.present(key.platform)) > 1:
            await self.conversations.heard(key.platform, key.chat_id, key.thread_id)

    async def answer_elsewhere(self, message: IncomingMessage, character: str) -> None:
        """The message is answered by another character of the scene, through its voice (as
        addressed to it: the scene chose it, and nobody chooses again)."""
        voice = self.voice(message.conversation.platform, character)
        assert voice is not None  # `answerer` chooses among the voiced characters
        await voice.answer_here(replace(message, conversation=replace(message.conversation, character=character),
                                        addressed=True))

    async def after_reply(self, turn: TurnRow, on_behalf: Asker | None) -> None:
        """A character's reply is out: when it names another character of the scene, the chain
        is not at `max_chain`, and the chain's starter (`on_behalf`) may reach that character and
        has a model call left, that character's answer is queued and given to its voice."""
        if len(self.voices) < 2 or not self.max_chain:  # nobody else to answer
            return
        conversation = await self.conversations.conversation_by_id(turn.conversation_id)
        if conversation is None or not conversation.is_shared or turn.reply_message_id is None:
            return
        reply = await self.conversations.message(turn.reply_message_id)
        if reply is None:
            return
        others = [name for name in self.present(conversation.platform)
                  if self.cast.character(name).id != reply.character_id]
        target = named(reply.content, others)
        if target is None:
            return
        newest_first = await self.conversations.recent_messages(conversation.id, self.max_chain + 1)
        # a person's message ends the chain, one written while this reply was being written too
        if await self.conversations.written_since(reply, heard_since=turn.created_at):
            log.info("a scene in %s:%s: %s", conversation.platform, conversation.chat_id, CHAIN_ENDED)
            return
        if characters_in_a_row(newest_first) >= self.max_chain:
            log.info("a scene in %s:%s reached [scenes] max_chain (%d character messages in a row); %s waits for "
                     "a person", conversation.platform, conversation.chat_id, self.max_chain, target)
            return
        stored = self.cast.character(target)
        key = ConversationKey(conversation.platform, conversation.chat_id, conversation.thread_id or None,
                              stored.character.name, True)
        if not await self.can_speak(key, target):
            log.info("a scene in %s:%s: %s cannot speak there (its bot is not in the chat, or may not post); "
                     "the chain ends", conversation.platform, conversation.chat_id, target)
            return
        # The chain turn is the starter's (turn.person_id, passed along the chain): the gate asks for
        # them (not through another character either), it takes a model call from their [limits],
        # and their /forgetme removes it with their own messages.
        admission = await self.gate.admit(MODEL_CALL, target, on_behalf, turn.person_id, key)
        if not admission.admitted:
            log.info("a scene in %s:%s stops: %s does not answer for the person who started the chain (%s); it "
                     "waits for a person", conversation.platform, conversation.chat_id, target,
                     "[access]" if admission.kept_out else admission.refusal)
            return
        ticket = await self.turns.queue_turn(conversation.id, turn.person_id, reply.id, character_id=stored.id)
        voice = self.voice(conversation.platform, target)
        assert voice is not None  # among `present`
        task = asyncio.create_task(self._continue(voice, key, QueuedTurn(reply.id, ticket), on_behalf))
        self._chains.add(task)
        task.add_done_callback(self._chains.discard)

    async def _continue(self, voice: Voice, key: ConversationKey, turn: QueuedTurn, on_behalf: Asker | None) -> None:
        try:
            await voice.continue_scene(key, turn, on_behalf)
        except Exception:
            log.exception("%s could not answer in the scene %s", key.character, key.chat_id)
            # a ticket its turn never took must not hold the scene's line (taken already: nothing to do)
            await self.turns.withdraw(turn.ticket)

    async def stop(self) -> None:
        for task in list(self._chains):
            task.cancel()
        await asyncio.gather(*self._chains, return_exceptions=True)
