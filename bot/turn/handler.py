"""The turn handler: one IncomingMessage in, one Reply out.

1-2. The message arrives (bot/turn/arrival.py): checked, stored first — whatever happens next, it is
   kept — with a model call taken under `[limits]` and its turn queued, in the order messages
   arrived; or the one line the person gets instead. A voice note is heard out of the line.
3. Wait for this conversation's previous turns, in arrival order: the message is queued in the
   conversation's line in the database as it is stored, so turns of one conversation start in
   order and one at a time in every process sharing it; different conversations run
   concurrently. Meanwhile its images are fetched and, with semantic recall, its vector asked for.
4. Read only what the turn needs: the speaker's saved memories in play, the summary, the window,
   the older passages the message calls back (by its words, and by meaning when on), and the
   lorebook entries the recent messages call up. A message from nobody in particular (a chat, a
   bot: SPEC section 2) reads and writes no saved memories.
5. Ask the model — with the images when it can look at them (a server that refuses them is asked
   again without) — running its tools (at most 4 rounds, at most 5 memory writes; bot/tools/),
   streaming text to the adapter, which tells us where the partial reply shows.
6. Store the reply and the turn's receipt in one transaction; or, when the model failed after its
   retries, undo the turn's memory writes and answer with a short plain error.
After the adapter delivered the reply it calls `Core.delivered` (bot/core.py), which starts
background work. A turn a crash cut off mid-reply is answered again (`answer_again`) when it is
less than 5 minutes old, replacing the partial message; see `CrashRecovery.cut_off`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import replace
from typing import Awaitable, Callable, Mapping, Sequence

from bot import metrics
from bot.access.gate import MESSAGE, MODEL_CALL, Gate
from bot.buttons import encode_action
from bot.characters.cards import StoredCharacter
from bot.characters.cast import Cast
from bot.contract import (
    Asker,
    Button,
    ConversationKey,
    Identity,
    IncomingMessage,
    QueuedTurn,
    Reply,
    ReplySink,
    TurnRef,
    traits_of,
)
from bot.in_flight import Abandoned
from bot.memory.recall import NEAREST as RECALL_NEAREST
from bot.memory.recall import Passage, recall
from bot.memory.semantic import SemanticRecall
from bot.memory.window import whole_chat
from bot.model.llm import (
    Completion,
    ImagesRefused,
    LLMClient,
    LLMError,
    PromptTooLong,
    ToolCallUnreadable,
)
from bot.model.tokens import TokenCounter
from bot.text import CHAIN_ENDED, ended_at_a_sentence
from bot.tools.toolbox import (
    MAX_TOOL_ROUNDS,
    Toolbox,
    TurnJournal,
    TurnScope,
    TurnTools,
)
from bot.turn.arrival import Arrival, ToHear, arrival_key
from bot.turn.attachments import in_words, prepare_images
from bot.memory.witnesses import Witnesses
from bot.turn.context import Context, read_context
from bot.turn.fit import fitted
from bot.turn.own_voice import OwnVoice
from bot.turn.prompt import Prompt, build_prompt
from bot.voice.listening import Listening
from bot.voice.speaking import Speaking
from storage.ports import ConversationRow, LeftTheLine, MessageRow, OutOfLine, Spend, Store

log = logging.getLogger(__name__)

LLM_FAILED = "Sorry, I couldn't answer just now ({reason}). Your message is saved; {hint}."
NOT_LATEST = "Only the latest reply can be regenerated."
NO_TOOLS = ("This model server takes no tools: you cannot roll dice, set reminders, search, read pages, draw or "
            "save memories now. If asked to, say so plainly; never pretend you did.")
DRAW_WHAT = "Say what to draw: /image a lighthouse at dusk"
NO_PICTURES = "{name} cannot draw here: pictures are not set up on this bot ([pictures] in its config)."
IMAGE_CALL = "image-command"  # the id of the picture call a person's /image makes
REGENERATE_LABEL = "🔄 Regenerate"
CUT_RATIO = 0.85  # a server that reports fewer prompt tokens than this share of what was sent cut it…
UNCALIBRATED_CUT_RATIO = 0.6  # …or this share, before its way of counting was seen
CUT_BY = 256  # …and by more than this many: tokenizers differ, a cut is large
MIN_PROMPT_TOKENS = 512  # the least a prompt is fitted to, whatever a server says
MAX_COUNT_RATIO = 1.5  # the most a server's count of a prompt is taken to exceed ours
CALIBRATE_FROM, CALIBRATE_UP_TO = 1_000, 2_000  # prompts that teach how a server counts: long enough for the
# template's own tokens to weigh little, short enough for no server to cut (2,048 is the smallest context)


class TurnHandler:
    def __init__(
        self,
        store: Store,
        llm: LLMClient,
        counter: TokenCounter,
        cast: Cast,
        context_window: int,
        gate: Gate,
        checkin_from: Callable[[ConversationKey, int | None], int | None],
        clock: Callable[[], float] = time.time,
        recall_tokens: int = 0,
        semantic: SemanticRecall | None = None,
        listening: Listening | None = None,
        speaks: Callable[[bool], bool] = lambda spoken_to: False,
        toolbox: Toolbox | None = None,
        speaking: Speaking | None = None,
        voices: Mapping[str, str] | None = None,
        witnesses: Witnesses | None = None,
    ):
        self.store = store
        self.recall_tokens = recall_tokens  # the recall budget (0: recall is off)
        self.semantic = semantic  # recall by meaning too ([recall] embedding_model); None: by words only
        self.gate = gate  # [access] and [limits] (bot/access/gate.py)
        self.llm = llm
        self.counter = counter
        self.cast = cast
        # messages that start an absence's check-in there (bot/writing_first/checkins.py)
        self.context_window = context_window  # shrinks to what the server holds, once it shows less
        self.told_of_cut = False  # a server's cut or refusal for length is told once a process
        self.server_ratio: float | None = None  # the server's count of a prompt over ours, once seen
        self.clock = clock
        # steps 1-3: checked, stored and queued in arrival order; a voice note heard (bot/turn/arrival.py)
        # who comes into a scene with a message or a reply (SPEC 22; the runtime's asks each character's voice)
        self.witnesses = witnesses or Witnesses(store, cast)
        self.arrival = Arrival(store.conversations, store.turns, llm, counter, cast, gate, lambda: self.context_window,
                               checkin_from, self.witnesses, listening)
        self.speaks = speaks  # whether a reply is spoken, given whether its message was a voice note
        self.speaking = speaking  # replies spoken ([voice] speech_model); None: never
        self.voices = {name.casefold(): voice for name, voice in (voices or {}).items()}  # each character's voice
        # what the character may do mid-reply (bot/tools/)
        self.toolbox = toolbox or Toolbox([], gate.tool_refusal, counter)

    # -- a turn ----------------------------------------------------------------------------
    async def handle(self, message: IncomingMessage, on_text: ReplySink | None = None) -> Reply:
        if message.draw is not None and not message.draw.strip():
            return Reply.refusal(DRAW_WHAT)
        # No await before joining the line: places are taken in the order messages arrived.
        arrival = self.arrival.order.join(arrival_key(message.conversation))
        try:
            async with arrival:
                queued = await self.arrival.store_and_queue(message)
        finally:
            if message.kept is not None:
                message.kept()
        if isinstance(queued, ToHear):  # stored as its placeholder: heard now, holding no one else
            queued = await self.arrival.hear_and_queue(queued)
        if isinstance(queued, Reply):
            return queued
        if message.rest is not None:  # more of it may still come (an album by webhook): its turn waits for it
            try:
                queued = await self.arrival.completed(queued, await message.rest())
            except Exception:  # its turn has begun: it answers what is stored, and ends as any turn does
                log.exception("the rest of a message to %s could not be gathered; it is answered as stored",
                              message.conversation)
        # While the turn waits for its place: its message's vector is asked for, and its images
        # are fetched (they are never stored).
        embedding = self._embedding(queued.user_row)
        seen = await prepare_images(queued.images)
        try:
            with metrics.TURN_WAIT_SECONDS.time():
                new_turn = (queued.turn_id if queued.ticket is None  # started as it was stored
                            else await self.store.turns.start_turn(queued.ticket))
        except (LeftTheLine, OutOfLine):  # stopping (kept: answered after the restart or by another
            return Reply.silence()       # process), or deleted while it waited (nothing to answer)
        return await self._answer(queued.character, queued.conversation, queued.person_id, queued.user_row, new_turn,
                                  on_text, unseen=queued.unseen + seen.unreadable, images=seen.looked_at,
                                  embedding=embedding, asker=message.asker, draw=message.draw)

    async def regenerate(self, key: ConversationKey, presser: Identity, turn: TurnRef, asker: Asker | None,
                         on_text: ReplySink | None = None) -> Reply:
        """Replace the latest reply (in a scene, its character's latest), undoing the memory
        writes its turn made (pinned entries are left alone). Only the person it answered may,
        and only where the gate lets them reach the reply's character; a chain the new reply
        starts is theirs (`on_behalf`), under each character's rules (SPEC 17)."""
        person_id = await self.cast.person_for(presser)
        conversation = await self.cast.conversation_for(key)
        if refusal := await self.regenerate_refusal(key, presser, turn, asker):
            return Reply.refusal(refusal)
        old = await self.store.turns.turn(turn.id)
        stored = self.cast.stored_by_id(old.character_id) or self.cast.character(key.character)
        if refusal := (await self.gate.admit(MODEL_CALL, stored.character.name, asker, person_id, key)).refusal:
            return Reply.refusal(refusal)
        new_turn = await self.store.turns.begin_regenerate(turn.id)  # checks "latest" again, as it starts
        if new_turn is None:
            return Reply.refusal(NOT_LATEST)
        user_row = await self.store.conversations.message(old.user_message_id)
        assert user_row is not None  # a turn's message goes only with the turn
        if user_row.role == "assistant":  # a chain turn (SPEC 15) reads nobody's memories, again
            return await self._answer(stored, conversation, None, user_row, new_turn, on_text, answered_for=person_id,
                                      asker=asker)
        return await self._answer(stored, conversation, person_id, user_row, new_turn, on_text, asker=asker)

    async def regenerate_refusal(self, key: ConversationKey, presser: Identity, turn: TurnRef,
                                 asker: Asker | None) -> str | None:
        """Why this person may not regenerate this reply now, or None if they may: only the
        latest reply, only the person it answered, and only where the gate lets them reach its
        character (`[access]`, the age rule) — a Regenerate is a model call like a message."""
        person_id = await self.cast.person_for(presser)
        conversation = await self.cast.conversation_for(key)
        pressed = await self.store.turns.turn(turn.id)
        if pressed is None or pressed.conversation_id != conversation.id:
            return NOT_LATEST
        latest = await self.store.turns.latest_turn(conversation.id, character_id=pressed.character_id)
        if latest is None or latest.id != turn.id:
            return NOT_LATEST
        if latest.person_id != person_id:
            return "Only the person this reply answered can regenerate it."
        character = (self.cast.stored_by_id(pressed.character_id) or self.cast.character(key.character)).character.name
        return (await self.gate.admit(MESSAGE, character, asker)).refusal

    async def answer_again(self, key: ConversationKey, queued: QueuedTurn, on_text: ReplySink | None = None,
                           asker: Asker | None = None) -> Reply:
        """Answer a queued message once its turn comes: a message a crash cut off (its memory
        writes were undone), queued again at its place in line (bot/core.py, `CrashRecovery.cut_off`),
        or in a scene another character's reply (bot/scenes.py) — which nobody answers once
        anyone wrote since: a person's message ends the chain (nothing is sent). `asker`: the
        chain's starter; none for a message answered again after a crash (it was let in as it came)."""
        stored = self.cast.character(key.character)
        conversation = await self.cast.conversation_for(key)
        row = await self.store.conversations.message(queued.message_id)
        try:
            new_turn = await self.store.turns.start_turn(queued.ticket)
        except (LeftTheLine, OutOfLine):
            return Reply.silence()
        if row is None or (row.role == "assistant" and await self.store.conversations.written_since(row)):
            if row is not None:
                log.info("a scene in %s:%s: %s", key.platform, key.chat_id, CHAIN_ENDED)
            await self.store.turns.fail_turn(new_turn)
            return Reply.silence()
        # a chain turn reads nobody's memories; its Regenerate is the chain's starter's (the turn's person)
        starter = (await self.store.turns.turn(new_turn)).person_id if row.role == "assistant" else None
        return await self._answer(stored, conversation, row.person_id, row, new_turn, on_text, answered_for=starter,
                                  asker=asker)

    @metrics.timed_turn
    async def _answer(
        self,
        stored: StoredCharacter,
        conversation: ConversationRow,
        person_id: int | None,
        user_row: MessageRow,
        turn_id: int,
        on_text: ReplySink | None,
        unseen: Sequence[str] = (),
        images: Sequence[tuple[str, str]] = (),
        embedding: asyncio.Task | None = None,
        answered_for: int | None = None,
        asker: Asker | None = None,
        draw: str | None = None,
    ) -> Reply:
        """Answer `user_row` as turn `turn_id` (a running turn row), for `asker` (who asks and
        where: the gate of its tools). `images` are (words, data
        URL) pairs for the model to look at; `unseen`, words for what it cannot; `embedding`,
        the message's vector on its way (semantic recall), when it was asked for already;
        `answered_for`: whose Regenerate button the reply carries when it is not `person_id`'s
        (a chain turn: the person whose message started the chain). `draw`: the scene of a
        person's `/image`: the picture tool is called with it before the model speaks."""
        sink = self._recording(turn_id, on_text) if on_text else None
        cost: Spend | None = None  # the last model call's, written with the turn's end
        try:
            if sink is not None:
                await sink("")  # the turn has begun (an adapter shows typing only now)

            async def recalling(newest_first: list[MessageRow], window: list[MessageRow],
                                sight: int | None) -> list[Passage]:
                return await self._recall(conversation.id, stored.character.name, user_row, newest_first, window,
                                          embedding, sight)

            async def reading() -> Context:
                return await read_context(self.store, stored, conversation, person_id, self.context_window,
                                          up_to_pos=user_row.pos, recalling=recalling,
                                          speaker=user_row.speaker_name)
            context = await reading()
            voice = OwnVoice.answering(stored.character.name, user_row.speaker_name, context.window)

            async def showing(text: str) -> None:
                """The reply so far to the adapter, as much of it as is surely the character's."""
                await sink(voice.shown(text))
            streamed = showing if sink is not None else None
            tools = None  # a server without tools gets none, and no error (SPEC 18)
            if self.llm.tools_supported is not False:
                tools = self.toolbox.for_turn(TurnScope(
                    turn_id, person_id, stored.id, stored.character.name, asker, self.clock(), context.learning,
                    zone=context.time_zone or self.toolbox.zone, conversation_id=conversation.id,
                    words=user_row.content if user_row.role == "user" else "",  # a chain turn answers a character
                    speaker_name=user_row.speaker_name, on_behalf_of=answered_for))
            if draw is not None and (tools is None or "picture" not in tools.tools):
                await asyncio.shield(self.store.turns.fail_turn(turn_id))
                return Reply.refusal(NO_PICTURES.format(name=stored.character.name))
            drawn = await self._drawing(tools, draw) if draw is not None and tools is not None else []
            guidance = tools.guidance if tools is not None else NO_TOOLS if self.llm.tools_supported is False else ""
            tool_tokens = tools.spec_tokens if tools is not None else 0  # in every request of the turn
            guidance_tokens = tools.guidance_tokens if tools is not None else 0  # in the system prompt

            def prompt_with(images: Sequence[tuple[str, str]], unseen: Sequence[str]) -> Prompt:
                """The prompt, every layer within the context less the reply's room (bot/turn/fit.py)."""
                as_counted = self.server_ratio or self.counter.margin  # the server's count over ours, or our doubt
                budget = int((self.context_window - self.llm.max_reply_tokens) / as_counted)
                return fitted(context, budget, lambda of: build_prompt(
                    of, speaker_name=user_row.speaker_name, tool_guidance=guidance, now=self.clock(),
                    unseen=in_words(unseen) if unseen else None, images=[url for _, url in images],
                    zone=self.toolbox.zone, tool_tokens=tool_tokens, guidance_tokens=guidance_tokens))

            prompt = prompt_with(images, unseen)
            # Whose allowance it is spent on (a chain turn: its starter's), and whether it may
            # start: what running turns may still spend counts (SPEC 17, a burst holds).
            charged = person_id if person_id is not None else answered_for
            may_spend = prompt.receipt["tokens"]["total"] + self.llm.max_reply_tokens
            if not await self.gate.hold(charged, turn_id, may_spend):
                await asyncio.shield(self.store.turns.fail_turn(turn_id))
                return await self.arrival.past_allowance(charged)
            try:
                completion, cost = await self._complete_with_tools(prompt, tools, streamed, charged, stored.id, drawn)
            except ImagesRefused:  # vision "auto", and the server cannot take images: without them
                unseen, images = [*unseen, *(what for what, _ in images)], []
                prompt = prompt_with(images, unseen)
                completion, cost = await self._complete_with_tools(prompt, tools, streamed, charged, stored.id, drawn)
            except PromptTooLong as refused:  # rebuilt within what the server holds, and asked once more
                log.info("the model server refused a prompt of %d tokens (as we count) for its length; rebuilt within "
                         "%s and asked once more", prompt.receipt["tokens"]["total"], refused.limit or "less")
                self._server_counts(refused.counted, prompt.receipt["tokens"]["total"], whole=True)
                self._server_holds(refused.limit or self.context_window * 3 // 4, "refused a prompt for its length")
                context = await reading()
                prompt = prompt_with(images, unseen)
                completion, cost = await self._complete_with_tools(prompt, tools, streamed, charged, stored.id, drawn)
            text = voice.kept(completion.text)
            if not text:
                raise LLMError("the model sent an empty answer")
            if completion.cut:  # stopped at max_reply_tokens: never a fragment stored as the whole reply
                text = ended_at_a_sentence(text)
        except LLMError as failure:
            log.warning("a turn in conversation %d failed: %s", conversation.id, failure)
            await asyncio.shield(self.store.turns.fail_turn(turn_id, cost))
            owner = asker is not None and traits_of(asker.platform).owned
            return Reply.error(LLM_FAILED.format(reason=failure, hint=failure.hint_for(owner)))
        except _PastAllowance:  # its rounds spent the allowance: the message is kept, not answered
            await asyncio.shield(self.store.turns.fail_turn(turn_id))
            return await self.arrival.past_allowance(charged)
        except Abandoned:  # stopping while a tool waited on the outside: the turn stays running, so
            # the next start finds it interrupted and answers the message again (SPEC 18)
            log.info("a turn in conversation %d was left for the restart: the process is stopping", conversation.id)
            return Reply.silence()
        except BaseException:
            await asyncio.shield(self.store.turns.fail_turn(turn_id, cost))
            raise
        journal = tools.scope.journal if tools is not None else TurnJournal()
        calls = journal.calls
        receipt = prompt.receipt | {
            "at": self.clock(),
            "llm_tokens": {"prompt": completion.prompt_tokens, "completion": completion.completion_tokens},
            "tools": [{"name": call.name, "arguments": call.arguments, "tokens": call.tokens} for call in calls],
        }
        kept = "\n".join([text, *journal.remembered])  # what the character remembers it did ("[sent a picture: …]")
        reply_tokens = self.counter.count(kept)
        named = await self.witnesses.bring_in(conversation, text)  # those it names witness it (SPEC 22)
        if await self.store.turns.finish_turn(turn_id, user_row, stored.character.name, kept, reply_tokens, receipt,
                                              character_id=stored.id, named=named, spend=cost) is None:
            return Reply.answer(text)  # its message was deleted meanwhile, or its person forgotten: kept nowhere
        buttons = []
        presser = answered_for if answered_for is not None else person_id
        if presser is not None:  # nobody in particular cannot press a button
            buttons = [[Button(REGENERATE_LABEL, encode_action(presser, "regen", turn_id))]]
        parts = list(journal.parts)  # after the text: what its tools made (a picture, SPEC 20)
        if self.speaking is not None and self.speaks(user_row.spoken):  # and the reply spoken (SPEC 16)
            parts.append(self.speaking.part(text, self.voices[stored.character.name.casefold()]))
        tool_line = journal.shown if self.toolbox.show else ""
        return Reply.answer(text, turn=TurnRef(turn_id), buttons=buttons, parts=parts, tool_line=tool_line,
                            on_behalf=asker)  # a chain this reply starts answers for them (SPEC 15)

    async def _recall(self, conversation_id: int, character_name: str, user_row: MessageRow,
                      newest_first: list[MessageRow], window: list[MessageRow],
                      embedding: asyncio.Task | None, seen_by: int | None) -> list[Passage]:
        """Older words the message calls back (none when the window holds the whole conversation),
        of what the character witnessed (SPEC 22)."""
        if not self.recall_tokens or (len(window) == len(newest_first) and whole_chat(newest_first)):
            return []
        nearest: list[int] = []
        if self.semantic is not None:
            embedding = embedding or self._embedding(user_row)
            nearest = await self.semantic.nearest(embedding, conversation_id, window[0].pos, RECALL_NEAREST, seen_by)
        return await recall(self.store.recall, conversation_id, user_row.content, window[0].pos, self.recall_tokens,
                            nearest, speakers=(user_row.speaker_name, character_name), seen_by=seen_by)

    def _embedding(self, user_row: MessageRow) -> asyncio.Task | None:
        """Ask for the message's vector (semantic recall on), without waiting for it."""
        return self.semantic.embed_message(user_row) if self.semantic is not None else None

    def _recording(self, turn_id: int, on_text: ReplySink) -> Callable[[str], Awaitable[None]]:
        """The adapter's sink, noting where the partial reply first shows (for crash recovery)."""
        recorded = False

        async def sink(text: str) -> None:
            nonlocal recorded
            shown = await on_text(text)
            if shown is not None and not recorded:
                recorded = True
                await self.store.turns.set_turn_partial(turn_id, str(shown))
        return sink

    async def _drawing(self, tools: TurnTools, scene: str) -> list[dict]:
        """A person's `/image <scene>` (SPEC 20): their call of the `picture` tool, made before the
        model speaks — the same tool, its gate and limits — and the round it adds to the prompt, so
        the character answers knowing what was drawn (or why not)."""
        arguments = json.dumps({"scene": scene}, ensure_ascii=False)
        said = await tools.run("picture", arguments)
        return [{"role": "assistant", "content": "", "tool_calls": [
                    {"id": IMAGE_CALL, "type": "function", "function": {"name": "picture", "arguments": arguments}}]},
                {"role": "tool", "tool_call_id": IMAGE_CALL, "content": said}]

    async def _complete_with_tools(self, prompt: Prompt, tools: TurnTools | None,
                                   on_text: Callable[[str], Awaitable[None]] | None, charged: int | None,
                                   character_id: int, drawn: Sequence[dict] = ()) -> tuple[Completion, Spend | None]:
        """The final answer, the model calling its tools for at most MAX_TOOL_ROUNDS rounds
        (SPEC 18 "Tool calls are counted as they happen"; the per-round and per-turn caps are the
        toolbox's, bot/tools/toolbox.py), and what its last call cost. Each tool round's tokens
        are written as it ends — the server's usage, else as counted here: the prompt and what
        the tools answered before it in, the text and calls out — and the allowance is asked
        before the next (`_PastAllowance`); the last call's cost is written with the turn's end
        (`finish_turn`, `fail_turn`), in its transaction. A tool call the server cannot parse
        ends the rounds, and the reply is asked for in words. `drawn`: a person's /image round,
        after the prompt."""
        messages = [*prompt.messages, *drawn]
        specs = tools.specs if tools is not None else []
        spent_in = spent_out = 0  # what the server reported of every round (the receipt says it)
        for round_number in range(MAX_TOOL_ROUNDS + 1):
            offer_tools = bool(specs) and round_number < MAX_TOOL_ROUNDS
            if round_number and await self.gate.past_allowance(charged):
                raise _PastAllowance()
            try:
                completion = await self.llm.complete(messages, tools=specs if offer_tools else None, on_text=on_text)
            except ToolCallUnreadable:  # a model that stumbled: this turn goes on in words
                specs, offer_tools = [], False
                completion = await self.llm.complete(messages, on_text=on_text)
            told = sum(call.tokens for call in tools.scope.journal.calls) if tools is not None else 0
            sent = prompt.receipt["tokens"]["total"] + told - (0 if offer_tools else prompt.receipt["tokens"]["tools"])
            self._heard_back(completion.prompt_tokens, sent)
            cost = self.gate.cost(
                charged, character_id, completion.prompt_tokens or sent,
                completion.completion_tokens or self.counter.count(
                    completion.text + "".join(c.name + c.arguments for c in completion.tool_calls)),
                turns=0 if round_number else 1)
            spent_in, spent_out = spent_in + completion.prompt_tokens, spent_out + completion.completion_tokens
            if not (offer_tools and completion.tool_calls):
                return replace(completion, prompt_tokens=spent_in, completion_tokens=spent_out), cost
            await self.gate.charge(cost)
            messages.append({
                "role": "assistant",
                "content": completion.text,  # "", never null: llama-cpp-python refuses null (HTTP 500)
                "tool_calls": [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.name, "arguments": c.arguments}}
                    for c in completion.tool_calls
                ],
            })
            assert tools is not None  # offered only with tools
            tools.next_round()
            for call in completion.tool_calls:
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": await tools.run(call.name, call.arguments)})
        raise AssertionError("not reached: the last round offers no tools")


    def _heard_back(self, server: int, sent: int) -> None:
        """What the server said it read of a prompt we counted `sent`: far less than expected is
        a cut (SPEC 8 "A cut is noticed"); else it tells how the server counts."""
        expected = sent * (self.server_ratio or 1.0)  # as the server counts, from what it said before
        if server and expected - server > CUT_BY and \
                server < expected * (CUT_RATIO if self.server_ratio else UNCALIBRATED_CUT_RATIO):
            self._server_holds(server + self.llm.max_reply_tokens,
                               f"kept {server:,} of the {round(expected):,} prompt tokens sent")
        else:
            self._server_counts(server, sent)

    def _server_counts(self, server: int | None, counted: int, whole: bool = False) -> None:
        """The server's tokenizer counts a prompt otherwise than ours (3–7 % higher for small
        models, lower for large vocabularies): prompts are fitted, and cuts judged, by the share
        the server last showed on a prompt it surely held whole — one it refused (`whole`), or one
        between CALIBRATE_FROM and CALIBRATE_UP_TO tokens, which no server cuts — kept within
        1/MAX_COUNT_RATIO and MAX_COUNT_RATIO."""
        if server and (whole or CALIBRATE_FROM <= counted <= CALIBRATE_UP_TO):
            self.server_ratio = min(max(server / counted, 1 / MAX_COUNT_RATIO), MAX_COUNT_RATIO)

    def _server_holds(self, tokens: int, why: str) -> None:
        """The server holds less context than believed: from now on every prompt fits `tokens`
        (less the reply's room). Said in one WARNING a process (SPEC 8 "A cut is noticed")."""
        if tokens >= self.context_window:
            return
        if not self.told_of_cut:
            self.told_of_cut = True
            log.warning("the model server %s: it holds about %d tokens of context, not [llm] context_window = %d. "
                        "Keepsake now fits every prompt to that. To give it more, raise the server's context "
                        "(Ollama: OLLAMA_CONTEXT_LENGTH=8192; llama.cpp: -c 8192) or lower context_window",
                        why, tokens, self.context_window)
        self.context_window = max(tokens, self.llm.max_reply_tokens + MIN_PROMPT_TOKENS)


class _PastAllowance(Exception):
    """A turn's tool rounds spent the person's allowance: it ends before its next model call."""
