"""Lorebooks: a card's `character_book` (SPEC section 13), as SillyTavern users expect it.

An entry goes into the prompt when one of its `keys` appears in the recent messages — the new
message and the ones just before it, `scan_depth` in all (the entry's own, else the book's, else
4). Keys are read the way SillyTavern reads them: a key written `/pattern/flags` is a regular
expression (flags `i`, `s`, `m`; others ignored); any other key is plain text, matched as a
whole word (a key of several words anywhere it is written), case-insensitive unless the entry is
`case_sensitive` — even when the exporter set `use_regex` on every entry. `{{char}}` in a key is
the character (its nickname, else its name) and `{{user}}` the person speaking, as SillyTavern
puts the names in before it matches. SillyTavern's own
export writes an entry's matching in its `extensions` (src/endpoints/characters.js), other
editors at its top, in snake_case or camelCase (or as Wyvern names them: `whole_words_only`,
`key_logic`), and each is read where it is found: `scan_depth`, `case_sensitive`,
`match_whole_words` (false: a key matches inside a longer word too; null: the user's own
setting, whose default is whole words, any case), `selectiveLogic` and `probability` (how
often, in percent, a matched entry fires; `useProbability: false` turns it off). A `selective`
entry also checks its `secondary_keys` by that logic: one of them (AND ANY, the default), all of
them (AND ALL), not all of them (NOT ALL) or none of them (NOT ANY) must be there; a `constant`
entry is always in; a disabled one never. The text of the entries called up is scanned in turn, as
SillyTavern's recursive scan does by default (the book's `recursive_scanning: false` turns it
off): entries it names are called up too, until none is new or they fill the budget, but for one
that `prevent_recursion` (its text calls up nothing), `exclude_recursion` (only the chat calls
it up) or `delay_until_recursion` (only another entry's text does). A Character Card V3 entry's
decorators (the `@@name value` lines its text begins with) are taken out of its text:
`@@activate` calls it up always, `@@dont_activate` never, `@@scan_depth` sets its scan depth,
`@@depth` places it among the messages (below), `@@additional_keys` are keys one of which must
be there too and `@@exclude_keys` keys none of which may be (each a comma-separated list, each as
often as it is written), `@@role` is whose words it is given as (below), `@@activate_only_after`
keeps it out until the character wrote that many messages of the chat (its greeting too), a
`@@@` fallback stands in for a decorator not followed, and the others (`@@activate_only_every`,
`@@position`) are ignored. SillyTavern's `delay` keeps an entry out until the chat holds that
many messages (the one answered too); either holds before anything calls the entry up, even
`@@activate`. SillyTavern's other timed effects count from the reply that called an entry up
afresh (its receipt says so: the character's replies before, in the conversation): a `sticky`
entry stays in for that many messages (the one answered with them), whatever is said — not
rolled again, its inclusion group's, first within the budget — and one with a `cooldown` then
stays out for that many more, unless it is sticky still. A regenerated reply counts as the one
it replaces did. A turn counts the chat (`ChatSoFar`) back no further than an entry waits for
or remembers, off its live window when that holds the whole chat.
Of the entries called up together that share an inclusion `group` (a comma-separated list of
names), one is kept, as SillyTavern keeps it: none when an entry of the group was called up
already; else, once those whose keys score lower than another's are out where an entry asks for
it (`use_group_scoring`), the one with `group_override` (of several, the highest
`insertion_order`), else one drawn by their `group_weight` (100 each by default). The entries
that fire are kept by `priority` (lower priority dropped first) within the lorebook budget — the
book's `token_budget`, else 1,000 tokens, never more than 10 % of the context window — and
placed by `insertion_order`, lowest first: with the character, or, for an
entry SillyTavern places at a depth (`position` 4, `depth` back, 4 by default; by the author's
note, `position` 2 or 3, where that note goes by default: 4 back) or written `@@depth N`, before
the newest N messages (its `depth`), as a system message, or as whose words its `role` says
(SillyTavern's, a number, or V3's `@@role`: "user" or "assistant"). With the character, entries
go in one system message, in insertion order: SillyTavern's `before_char` and `after_char` both
go after the character's own text, which stays the same from turn to turn so a server's prompt
cache keeps it. Entry text is the card author's, like the description: it goes in as the
character's instructions, not as anything a person said, but where its role says so.

Untrusted input has a budget (SPEC 9): keys are compiled once, when the card loads (a broken
regex is skipped with a WARNING; the card still loads); a plain key is first looked for as a
plain substring, so most keys cost no regex at all; matching runs off the event loop (the
caller's `asyncio.to_thread`) with the `regex` module, which lets go of the interpreter while it
matches and stops after KEY_TIME_LIMIT_S. A key that runs out of time is skipped from then on,
with one WARNING naming the card and the entry; a turn's matching stops after MATCH_BUDGET_S.
"""

from __future__ import annotations

import functools
import logging
import math
import random
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

import regex

from bot.characters.macros import CHAR, USER, filled

log = logging.getLogger(__name__)

DEFAULT_SCAN_DEPTH = 4
DEFAULT_DEPTH = 4  # how far back SillyTavern places what goes among the messages (an entry, a note) by default
DEFAULT_BUDGET_TOKENS = 1_000
MAX_CONTEXT_SHARE = 0.10
KEY_TIME_LIMIT_S = 0.1  # one key against the scanned text
MATCH_BUDGET_S = 1.0  # all of a turn's keys
_WRITTEN_AS_REGEX = re.compile(r"^/(.+)/([a-z]*)$", re.DOTALL)  # SillyTavern's `/pattern/flags`
_FLAGS = {"i": regex.IGNORECASE, "s": regex.DOTALL, "m": regex.MULTILINE}
# SillyTavern's `selectiveLogic`: what the secondary keys of a selective entry must show (some
# editors write its name: `key_logic: "NOT_ANY"`)
AND_ANY, NOT_ALL, NOT_ANY, AND_ALL = 0, 1, 2, 3
_LOGIC_NAMES = {"AND_ANY": AND_ANY, "NOT_ALL": NOT_ALL, "NOT_ANY": NOT_ANY, "AND_ALL": AND_ALL}
# The Character Card V3 decorators this book follows; every other one is taken out of the entry's
# text and ignored, as the spec allows (@@activate_only_every, @@position)
FOLLOWED_DECORATORS = ("activate", "dont_activate", "scan_depth", "depth", "role", "additional_keys", "exclude_keys",
                       "activate_only_after")
# SillyTavern's world-info positions that place an entry among the messages: at a depth of its
# own, or at the top or bottom of the author's note, which goes DEFAULT_DEPTH back by default
AT_DEPTH, BY_THE_NOTE = 4, (2, 3)
# whose words text placed among the messages is given as: SillyTavern numbers them in this order
ROLES = ("system", "user", "assistant")
DEFAULT_GROUP_WEIGHT = 100  # SillyTavern's: an entry's chance in its inclusion group, against the others'


class LorebookError(ValueError):
    """A `character_book` that is not shaped like one; its text names the field."""


@dataclass(frozen=True)
class Key:
    """One key, compiled once. `literal` is a plain key's text (lowercased unless the entry is
    case-sensitive), looked for as a substring before its pattern runs; None for a regular
    expression. A key that names the person speaking (`{{user}}`) has no pattern: it is compiled
    for each name it meets (`_named`)."""

    written: str
    pattern: regex.Pattern | None
    literal: str | None


def compile_key(written: str, case_sensitive: bool, whole_words: bool = True) -> Key:
    """A key as SillyTavern reads it: a plain one of one word is matched as a whole word when
    `whole_words`; one of several words, or any plain key without `whole_words`, wherever it is
    written. Raises regex.error for a broken `/pattern/`."""
    if USER.search(written):
        return Key(written, None, None)  # compiled for each speaker's name
    if found := _WRITTEN_AS_REGEX.match(written):
        flags = 0
        for letter in found.group(2):
            flags |= _FLAGS.get(letter, 0)
        return Key(written, regex.compile(found.group(1), flags), None)
    flags = 0 if case_sensitive else regex.IGNORECASE
    literal = written if case_sensitive else written.lower()
    text = regex.escape(written)
    if whole_words and len(written.split()) == 1:
        text = rf"(?<!\w){text}(?!\w)"
    return Key(written, regex.compile(text, flags), literal)


@dataclass(frozen=True)
class LoreEntry:
    name: str
    content: str
    keys: tuple[Key, ...] = ()
    secondary_keys: tuple[Key, ...] = ()
    additional_keys: tuple[Key, ...] = ()  # V3's @@additional_keys: one of them must be there too
    exclude_keys: tuple[Key, ...] = ()  # V3's @@exclude_keys: none of them may be there
    selective: bool = False
    logic: int = AND_ANY  # what the secondary keys must show (SillyTavern's selectiveLogic)
    constant: bool = False
    case_sensitive: bool = False
    whole_words: bool = True
    prevents_recursion: bool = False  # its text calls up no other entry
    excluded_from_recursion: bool = False  # only the chat calls it up, never another entry's text
    delayed_until_recursion: bool = False  # only another entry's text calls it up
    scan_depth: int | None = None  # how many of the newest messages it looks in; None: the book's
    depth: int | None = None  # placed before this many of the newest messages; None: with the character
    role: str = "system"  # whose words it is given as when placed at a depth (ROLES)
    groups: tuple[str, ...] = ()  # its inclusion groups: of each, one entry called up at a time
    group_override: bool = False  # it wins its groups (the highest insertion_order of those that do)
    group_weight: float = DEFAULT_GROUP_WEIGHT  # else its chance against the others of its group
    group_scoring: bool = False  # it loses to an entry of its group more of whose keys are there
    insertion_order: int = 100
    priority: int = 10
    probability: float = 100  # how often, in percent, it fires when matched (SillyTavern's)
    delay: int = 0  # not called up before the chat holds this many messages (SillyTavern's)
    after_replies: int = 0  # nor before the character wrote this many (V3's @@activate_only_after)
    sticky: int = 0  # called up, it stays in for this many messages of the chat (SillyTavern's)
    cooldown: int = 0  # called up, it stays out for this many after that (SillyTavern's)
    uid: str = ""  # which entry of its book it is, for what earlier replies remember of it
    tokens: int = 0  # counted once, when the character is loaded

    @property
    def timed(self) -> bool:
        """Whether what earlier replies called it up for holds it in or out now."""
        return bool(self.sticky or self.cooldown)


@dataclass(frozen=True)
class ChatSoFar:
    """What a turn knows of the chat before it, as far as the book's entries ask
    (`Lorebook.waits_for`): how long it is, counted back from the message answered (with it) no
    further than any entry waits for — its messages, and the character's own (its greeting
    too) — and the timed entries earlier replies hold in (`sticky`) or out (`cooling`), by uid."""

    messages: int
    replies: int
    sticky: frozenset[str] = frozenset()
    cooling: frozenset[str] = frozenset()


class _Matcher:
    """Matching keys against the newest messages (`recent`, newest first) and the text of the
    entries called up so far (`carried`), until the turn's `deadline` (MATCH_BUDGET_S); `user` is
    the name of the person speaking."""

    def __init__(self, book: "Lorebook", recent: list[str], carried: list[str], deadline: float, user: str):
        self.book, self.recent, self.carried, self.deadline, self.user = book, recent, carried, deadline, user
        self._scanned: dict[int, tuple[str, str]] = {}  # by scan depth: the text, and it lowered

    def scanned(self, entry: LoreEntry) -> tuple[str, str]:
        """The text an entry's keys are looked for in, and it lowered: as many of the newest
        messages as its scan depth (its own, else the book's), and what was called up."""
        depth = self.book.scan_depth if entry.scan_depth is None else entry.scan_depth
        if depth not in self._scanned:
            text = "\n".join(self.recent[:depth] + self.carried)
            self._scanned[depth] = (text, text.lower())
        return self._scanned[depth]

    def out_of_time(self) -> bool:
        return time.monotonic() >= self.deadline

    def any_of(self, entry: LoreEntry, keys: tuple[Key, ...]) -> bool:
        text, lowered = self.scanned(entry)
        for key in keys:
            if key.pattern is None and (key := _named(key.written, self.user, entry.case_sensitive,
                                                      entry.whole_words)) is None:
                continue
            if key.literal is not None and key.literal not in (text if entry.case_sensitive else lowered):
                continue  # the words are not there at all: no pattern needs to run
            if (entry.name, key.written) in self.book.too_slow:
                continue
            limit = min(KEY_TIME_LIMIT_S, self.deadline - time.monotonic())
            if limit <= 0:
                return False
            try:
                if key.pattern.search(text, timeout=limit, concurrent=True):
                    return True
            except TimeoutError:
                if limit == KEY_TIME_LIMIT_S:  # the key's own fault, not the turn's budget
                    self.book.too_slow.add((entry.name, key.written))
                    log.warning("lorebook of %s: entry %r key %r took over %.1f s to match and is skipped from now on",
                                self.book.card, entry.name, key.written, KEY_TIME_LIMIT_S)
        return False

    def fires(self, entry: LoreEntry) -> bool:
        if entry.constant:
            return True
        if not self.any_of(entry, entry.keys):
            return False
        if entry.additional_keys and not self.any_of(entry, entry.additional_keys):
            return False
        if entry.exclude_keys and self.any_of(entry, entry.exclude_keys):
            return False
        if not (entry.selective and entry.secondary_keys):
            return True
        if entry.logic == AND_ANY:
            return self.any_of(entry, entry.secondary_keys)
        found = [self.any_of(entry, (key,)) for key in entry.secondary_keys]
        return {NOT_ALL: not all(found), NOT_ANY: not any(found), AND_ALL: all(found)}[entry.logic]

    def score(self, entry: LoreEntry) -> int:
        """How many of an entry's keys are there (SillyTavern's group scoring): its primary keys,
        and its secondary ones where they add to a match (AND ANY; AND ALL when all are there)."""
        primary = sum(self.any_of(entry, (key,)) for key in entry.keys)
        secondary = sum(self.any_of(entry, (key,)) for key in entry.secondary_keys)
        if entry.logic == AND_ANY or (entry.logic == AND_ALL and secondary == len(entry.secondary_keys)):
            return primary + secondary
        return primary


@dataclass(frozen=True)
class Lorebook:
    entries: tuple[LoreEntry, ...] = ()
    scan_depth: int = DEFAULT_SCAN_DEPTH
    token_budget: int = DEFAULT_BUDGET_TOKENS
    recursive: bool = True  # the text of the entries called up calls up more (SillyTavern's default)
    card: str = "the card"  # named in warnings
    char: str = ""  # what {{char}} stands for
    too_slow: set[tuple[str, str]] = field(default_factory=set, compare=False, repr=False)  # (entry, key)
    roll: Callable[[], float] = field(default=random.random, compare=False, repr=False)  # in [0, 1): probability's

    def counted(self, count: Callable[[str], int]) -> "Lorebook":
        """The book with each entry's tokens counted (once, at load)."""
        return replace(self, entries=tuple(replace(e, tokens=count(e.content)) for e in self.entries))

    def budget(self, context_window: int) -> int:
        return min(self.token_budget, int(context_window * MAX_CONTEXT_SHARE))

    def waits_for(self) -> ChatSoFar:
        """The most messages and replies an entry of the book waits for (none: nothing to count)."""
        return ChatSoFar(max((e.delay for e in self.entries), default=0),
                         max((e.after_replies for e in self.entries), default=0))

    def remembers(self) -> int:
        """How many messages back a reply's calling up a timed entry still counts (0: none is timed)."""
        return max((e.sticky + e.cooldown for e in self.entries), default=0)

    def entries_for(self, recent_texts: Iterable[str], context_window: int, user: str = "",
                    chat: ChatSoFar | None = None) -> list[LoreEntry]:
        """The entries the recent messages (newest first) call up, and, as SillyTavern's
        recursive scan does, those the text of the entries called up names in turn; within the
        budget, in insertion order. `user` is the name of the person speaking, which a key's
        `{{user}}` stands for; `chat`, what the turn knows of the chat before it (None: nothing,
        and no entry waits for it or is held in or out). It may take up to MATCH_BUDGET_S: call it
        off the event loop."""
        deadline, budget = time.monotonic() + MATCH_BUDGET_S, self.budget(context_window)
        recent, carried = list(recent_texts), []
        fired: list[LoreEntry] = []
        # an entry that waits for a longer chat is not called up at all yet, not even by @@activate;
        # one an earlier reply called up is in while it is sticky, and out while it cools down
        held = chat.sticky if chat is not None else frozenset()
        waiting = [entry for entry in self.entries if chat is None or (
            entry.delay <= chat.messages and entry.after_replies <= chat.replies
            and (entry.uid not in chat.cooling or entry.uid in held))]
        recursing = False
        while waiting:
            matcher = _Matcher(self, recent, carried, deadline, user)
            matched = self._one_of_each_group(self._called_up(matcher, waiting, recursing, held), fired, matcher, held)
            # an entry with a `probability` below 100 fires that often when matched (a sticky one
            # is not rolled again); one that failed its roll is not checked again this turn (as
            # SillyTavern's)
            called = [entry for entry in matched if entry.probability >= 100 or entry.uid in held
                      or self.roll() * 100 <= entry.probability]
            fired += called
            said = [filled(entry.content, self.char, user, hidden_keys=True)  # as it goes in, hidden keys read
                    for entry in called if not entry.prevents_recursion]
            # as SillyTavern's, the scan goes no deeper once what was called up fills the budget
            if (not (self.recursive and said) or sum(entry.tokens for entry in fired) >= budget
                    or time.monotonic() >= deadline):
                break
            # what a group left out stays waiting: it may be called up deeper in the scan
            waiting = [entry for entry in waiting if all(entry is not new for new in matched)]
            carried = carried + said
            recursing = True
        kept, used = [], 0  # sticky ones first, as SillyTavern's
        for entry in sorted(fired, key=lambda e: (e.uid not in held, -e.priority, e.insertion_order)):
            if used + entry.tokens <= budget:
                kept.append(entry)
                used += entry.tokens
        return sorted(kept, key=lambda e: e.insertion_order)

    def _one_of_each_group(self, matched: list[LoreEntry], fired: list[LoreEntry], matcher: _Matcher,
                           held: frozenset[str]) -> list[LoreEntry]:
        """The matched entries with one of each inclusion group, as SillyTavern keeps them: the
        sticky ones (`held`) where there are; none when an entry of the group was called up
        already; else, once those whose keys score lower than another's are out (where an entry
        asks for scoring), the one that overrides the group (of several, the highest insertion
        order), else one drawn by their weights. One left out may still be called up later in the
        scan."""
        kept = list(matched)
        for group in dict.fromkeys(name for entry in matched for name in entry.groups):
            members = [entry for entry in kept if group in entry.groups]
            if stuck := [entry for entry in members if entry.uid in held]:
                kept = [entry for entry in kept if group not in entry.groups or entry in stuck]
                continue
            if any(group in entry.groups for entry in fired):
                winner = None
            elif len(members) < 2:
                continue
            else:
                if any(entry.group_scoring for entry in members):
                    scores = [matcher.score(entry) for entry in members]
                    members = [entry for entry, score in zip(members, scores)
                               if not entry.group_scoring or score == max(scores)]
                overriding = [entry for entry in members if entry.group_override]
                winner = max(overriding, key=lambda e: e.insertion_order) if overriding else self._drawn(members)
            kept = [entry for entry in kept if group not in entry.groups or entry is winner]
        return kept

    def _drawn(self, members: list[LoreEntry]) -> LoreEntry:
        """One of an inclusion group's entries, each as likely as its weight (SillyTavern's draw)."""
        drawn, reached = self.roll() * sum(entry.group_weight for entry in members), 0.0
        for entry in members:
            reached += entry.group_weight
            if drawn <= reached:
                return entry
        return members[-1]

    def _called_up(self, matcher: _Matcher, entries: list[LoreEntry], recursing: bool,
                   held: frozenset[str]) -> list[LoreEntry]:
        """The entries the matcher's text calls up: from the chat, all but those delayed until
        recursion; from the entries' own text, all but those excluded from it; and those sticky
        (`held`), whatever is said."""
        called = []
        for entry in entries:
            if entry.uid in held:
                called.append(entry)
                continue
            if matcher.out_of_time():
                log.warning("lorebook of %s: matching stopped after %.1f s; entries from %r on were not checked",
                            self.card, MATCH_BUDGET_S, entry.name)
                break
            if entry.excluded_from_recursion if recursing else entry.delayed_until_recursion:
                continue
            if matcher.fires(entry):
                called.append(entry)
        return called


def read_lorebook(book: Any, card: str = "the card", char: str = "") -> Lorebook:
    """A card's `character_book` (V2 or V3), or an empty book when the card has none; `char` is
    what `{{char}}` in its keys stands for."""
    if book is None:
        return Lorebook(card=card)
    if not isinstance(book, dict):
        raise LorebookError("'character_book' should be an object")
    entries = book.get("entries") or []
    if not isinstance(entries, list):
        raise LorebookError("'character_book.entries' should be a list")
    read = [_entry(raw, i, card, char) for i, raw in enumerate(entries)]
    return Lorebook(
        card=card,
        char=char,
        entries=tuple(e for e in read if e is not None),
        scan_depth=_whole(book, "scan_depth", DEFAULT_SCAN_DEPTH, "character_book", minimum=1),
        token_budget=_whole(book, "token_budget", DEFAULT_BUDGET_TOKENS, "character_book", minimum=1),
        recursive=_flag(book.get("recursive_scanning"), True),
    )


def _entry(raw: Any, index: int, card: str, char: str) -> LoreEntry | None:
    where = f"character_book.entries[{index}]"
    if not isinstance(raw, dict):
        raise LorebookError(f"'{where}' should be an object")
    if raw.get("enabled", True) is False:
        return None
    content = raw.get("content") or ""
    if not isinstance(content, str):
        raise LorebookError(f"'{where}.content' should be text")
    content, decorators = _decorated(content)
    if not content or ("dont_activate" in decorators and "activate" not in decorators):
        return None  # nothing to add, or never to be called up
    case_sensitive = _flag(_setting(raw, "case_sensitive", "caseSensitive"), False)
    whole_words = _flag(_setting(raw, "match_whole_words", "matchWholeWords", "whole_words_only"), True)
    delayed = _setting(raw, "delay_until_recursion", "delayUntilRecursion")  # newer SillyTavern: a level
    scan_depth = depth_of(_first(decorators, "scan_depth") or _setting(raw, "scan_depth", "scanDepth"))
    written = _keys(raw, "keys", where)
    name = str(raw.get("name") or raw.get("comment") or (written[0] if written else f"entry {index + 1}"))

    def compiled(texts: tuple[str, ...]) -> tuple[Key, ...]:
        keys = []
        for text in texts:
            if not (text := _with_name(text, CHAR, char)):
                continue
            try:
                keys.append(compile_key(text, case_sensitive, whole_words))
            except regex.error as problem:
                log.warning("lorebook of %s: entry %r key %r is not a valid regular expression (%s); it is skipped",
                            card, name, text, problem)
        return tuple(keys)

    return LoreEntry(
        name=name,
        content=content,
        keys=compiled(written),
        secondary_keys=compiled(_keys(raw, "secondary_keys", where)),
        additional_keys=compiled(_listed(decorators, "additional_keys")),
        exclude_keys=compiled(_listed(decorators, "exclude_keys")),
        selective=bool(raw.get("selective")),
        logic=_logic(_setting(raw, "selectiveLogic", "selective_logic", "key_logic")),
        constant=bool(raw.get("constant")) or "activate" in decorators,
        case_sensitive=case_sensitive,
        whole_words=whole_words,
        prevents_recursion=_flag(_setting(raw, "prevent_recursion", "preventRecursion"), False),
        excluded_from_recursion=_flag(_setting(raw, "exclude_recursion", "excludeRecursion"), False),
        delayed_until_recursion=bool(delayed) if isinstance(delayed, (bool, int, float)) else False,
        scan_depth=scan_depth,
        depth=_placed(raw, decorators),
        role=role_of(_first(decorators, "role") or _setting(raw, "role")),
        groups=tuple(name.strip() for name in str(_setting(raw, "group") or "").split(",") if name.strip()),
        group_override=_flag(_setting(raw, "group_override", "groupOverride"), False),
        group_weight=_weight(_setting(raw, "group_weight", "groupWeight")),
        group_scoring=_flag(_setting(raw, "use_group_scoring", "useGroupScoring"), False),
        insertion_order=_whole(raw, "insertion_order", 100, where),
        priority=_whole(raw, "priority", 10, where),
        probability=_probability(raw),
        delay=depth_of(_setting(raw, "delay")) or 0,
        after_replies=depth_of(_first(decorators, "activate_only_after")) or 0,
        sticky=depth_of(_setting(raw, "sticky")) or 0,
        cooldown=depth_of(_setting(raw, "cooldown")) or 0,
        uid=f"{index}:{name}",  # its place in the book and its name: an edited card misplaces nothing
    )


def _with_name(key: str, placeholder: re.Pattern, name: str) -> str:
    """A key with `name` where `placeholder` is, as plain text even in a `/pattern/`."""
    is_pattern = _WRITTEN_AS_REGEX.match(key) is not None
    return placeholder.sub(lambda _: regex.escape(name) if is_pattern else name, key).strip()


@functools.lru_cache(maxsize=1024)
def _named(written: str, user: str, case_sensitive: bool, whole_words: bool) -> Key | None:
    """A key that names the person speaking, with `user`'s name in it (as plain text, even in a
    `/pattern/`); None when nothing is left of it, or a pattern breaks."""
    text = _with_name(written, USER, user)
    if not text:
        return None
    try:
        return replace(compile_key(text, case_sensitive, whole_words), written=written)
    except regex.error:
        return None


def _decorated(content: str) -> tuple[str, dict[str, list[str]]]:
    """An entry's text without the Character Card V3 decorators it begins with (`@@name value`
    lines), and the values of those of them this book follows, by name, in the order written. A
    fallback (`@@@name value`) stands in for the decorator before it when that one is not followed."""
    lines = content.strip().splitlines()
    followed: dict[str, list[str]] = {}
    heeded = True  # whether the decorator a fallback would stand in for was followed
    taken = 0
    for line in lines:
        if not line.startswith("@@"):
            break
        taken += 1
        fallback = line.startswith("@@@")
        if fallback and heeded:
            continue
        name, _, value = line.lstrip("@").partition(" ")
        heeded = name.strip() in FOLLOWED_DECORATORS
        if heeded:
            followed.setdefault(name.strip(), []).append(value.strip())
    return "\n".join(lines[taken:]).strip(), followed


def depth_of(value: Any) -> int | None:
    """A depth (how many of the newest messages) written as a whole number, or its digits (a
    decorator's value); None for anything else: the default then holds, as a setting never stops
    a card from loading."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def role_of(value: Any) -> str:
    """Whose words text placed among the messages is given as: "system", "user" or "assistant",
    written as the word (V3's `@@role`, a depth prompt's) or as SillyTavern's number (0, 1, 2);
    "system" for anything else, as a setting never stops a card from loading."""
    if isinstance(value, str) and value.strip().lower() in ROLES:
        return value.strip().lower()
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(ROLES):
        return ROLES[value]
    return "system"


def _weight(value: Any) -> float:
    """An entry's weight in its inclusion group: a number, as SillyTavern takes it (its size);
    DEFAULT_GROUP_WEIGHT for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return DEFAULT_GROUP_WEIGHT
    return abs(value)


def _probability(raw: dict) -> float:
    """How often an entry fires when matched, in percent: its `probability` (0 to 100) unless its
    `useProbability` is false; 100 for anything else, as a setting never stops a card from loading."""
    value = _setting(raw, "probability")
    if _setting(raw, "useProbability", "use_probability") is False or isinstance(value, bool) \
            or not isinstance(value, (int, float)):
        return 100
    return min(100, max(0, value))


def _first(decorators: dict[str, list[str]], name: str) -> str | None:
    """A decorator's value, where only the first of its name counts (V3)."""
    return decorators[name][0] if name in decorators else None


def _listed(decorators: dict[str, list[str]], name: str) -> tuple[str, ...]:
    """The comma-separated values of a decorator that may be written more than once."""
    return tuple(key.strip() for value in decorators.get(name, []) for key in value.split(",") if key.strip())


def _placed(raw: dict, decorators: dict[str, list[str]]) -> int | None:
    """How many of the newest messages an entry goes before (None: with the character): its
    `@@depth`, else where SillyTavern's `position` puts it."""
    if (written := depth_of(_first(decorators, "depth"))) is not None:
        return written
    position = _setting(raw, "position")
    if position == AT_DEPTH and (own := depth_of(_setting(raw, "depth"))) is not None:
        return own
    return DEFAULT_DEPTH if position == AT_DEPTH or position in BY_THE_NOTE else None


def _setting(raw: dict, *names: str) -> Any:
    """An entry's setting where editors write it: in its `extensions` (SillyTavern's own export)
    or at its top, in snake_case or camelCase; None (the user's own setting) when none has it."""
    extensions = raw.get("extensions") if isinstance(raw.get("extensions"), dict) else {}
    return next((place[name] for place in (extensions, raw) for name in names if place.get(name) is not None), None)


def _logic(value: Any) -> int:
    """SillyTavern's `selectiveLogic`, a number or (some editors) its name; an unknown one reads as
    the default, AND ANY, as a key never stops a card from loading."""
    if isinstance(value, str):
        return _LOGIC_NAMES.get(value.strip().upper(), AND_ANY)
    return int(value) if value in (NOT_ALL, NOT_ANY, AND_ALL) and not isinstance(value, bool) else AND_ANY


def _flag(value: Any, otherwise: bool) -> bool:
    """A setting that is true or false; anything else (null: the user's own setting) is `otherwise`."""
    return value if isinstance(value, bool) else otherwise


def _keys(raw: dict, field: str, where: str) -> tuple[str, ...]:
    value = raw.get(field) or []
    if isinstance(value, str):  # some editors write one key as a comma-separated text
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise LorebookError(f"'{where}.{field}' should be a list of texts")
    return tuple(k.strip() for k in value if k.strip())


def _whole(raw: dict, field: str, default: int, where: str, minimum: int | None = None) -> int:
    value = raw.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise LorebookError(f"'{where}.{field}' should be a whole number")
    if minimum is not None and value < minimum:
        return default
    return int(value)
