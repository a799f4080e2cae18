"""Every command, declared once (SPEC section 6): its name, typed options, help and platforms.

The text parser (Telegram, the console), /help, Discord's slash-command tree and Telegram's
setMyCommands are all made from this table; tests/test_command_table.py compares them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bot.commands.base import UsageError
from bot.commands.persona import MAX_PERSONA
from bot.contract import CommandSpec, OptionSpec
from bot.memory.drafting import MAX_SELECTED_MESSAGES
from bot.text import listed, parse_number
from storage.ports import SCOPES

MEMORY_ID = OptionSpec("id", "The memory's number, as in #12", "number", required=True, low=1)
# In a scene (SPEC 15) a /memory command acts on the character named; typed first: `character:Aki`.
CHARACTER = OptionSpec("character", "In a scene: which character (default: the one that last answered you)",
                       keyword=True, in_usage=False)
SCENE_HELP = ("In a scene with several characters, put character:<name> first to act on that character's "
              "memories (default: the one that last answered you).")


def _in_scenes(group: "CommandSpec") -> "CommandSpec":
    """A command group whose every subcommand takes `character` (last: Discord wants the
    required options first)."""
    return replace(group, subcommands=tuple(replace(sub, options=(*sub.options, CHARACTER))
                                            for sub in group.subcommands))


TABLE: tuple[CommandSpec, ...] = (
    CommandSpec("start", "Say hello", only="text_commands"),
    _in_scenes(CommandSpec("memory", "What I remember about you: /memory view, add, pin, clear, …", subcommands=(
        CommandSpec("view", "List your saved memories: pinned first, then newest; /memory view #12: one, with its story",
                    options=(
            OptionSpec("scope", "Only this character's memories, or only global ones", choices=SCOPES),
            OptionSpec("page", "Which page (10 memories a page)", "number", low=1),
            OptionSpec("id", "One memory, with where it came from and when it was used: its number, as in #12",
                       "number", low=1, shown="#id", marked="#"))),
        CommandSpec("add", "Add a memory",
                    "add one (scope:global shares it with every character, pin:yes pins it)", options=(
            OptionSpec("text", "The fact to remember (at most 500 characters)", required=True, rest=True),
            OptionSpec("scope", "character: only this character; global: every character", choices=SCOPES),
            OptionSpec("pin", "Pin it: always remembered, never changed by the AI", "yes_no"))),
        CommandSpec("edit", "Change a memory (pinned ones too)", options=(
            MEMORY_ID, OptionSpec("text", "Its new text", required=True, rest=True))),
        CommandSpec("delete", "Delete a memory", options=(MEMORY_ID,)),
        CommandSpec("pin", "Pin a memory: always remembered, never changed by the AI", options=(MEMORY_ID,)),
        CommandSpec("unpin", "Unpin a memory", options=(MEMORY_ID,)),
        CommandSpec("clear", "Delete all unpinned memories of a scope (asks first)", options=(
            OptionSpec("scope", "Which memories to clear (default: character)", choices=SCOPES),)),
        CommandSpec("learning", "Let the character learn from this chat, or not", options=(
            OptionSpec("state", "on: saves and reads your memories; off: neither", required=True,
                       choices=("on", "off")),)),
        CommandSpec("summary", "This conversation's summary, and how much is not summarized yet",
                    "this conversation's summary; edit S3 <text> changes entry S3", options=(
            OptionSpec("edit", "The entry to change, as in S3", keyword=True, shown="entry"),
            OptionSpec("text", "The entry's new text", rest=True, shown="new text"))),
        CommandSpec("rebuild", "Rebuild this conversation's summary from its whole history"),
        CommandSpec("generate", "Let the AI draft memories from what you tell it", options=(
            OptionSpec("description", "What the character should know about you (at most 1,000 characters)",
                       required=True, rest=True),)),
        CommandSpec("save", "Save the last messages of this conversation as a pinned memory", options=(
            OptionSpec("n", f"How many of the last messages (1 to {MAX_SELECTED_MESSAGES})", "number",
                       low=1, high=MAX_SELECTED_MESSAGES),)),
        CommandSpec("why", "What was in the prompt of the last reply, layer by layer"),
        CommandSpec("export", "All your memories as a file: JSON (to import again) or Markdown (to read)", options=(
            OptionSpec("format", "json (the default: the memory page imports it) or markdown (to read)",
                       choices=("json", "markdown")),)),
        CommandSpec("page", "A private link to your memory page (works once, within 10 minutes)"),
    ))),
    CommandSpec("persona", "Who you are in the story: /persona set, view, clear", subcommands=(
        CommandSpec("set", "Tell every character who you are in the story: name, looks, role", options=(
            OptionSpec("text", f"Who you are (at most {MAX_PERSONA:,} characters)", required=True, rest=True),),
            key="persona_set"),
        CommandSpec("view", "Show your persona", key="persona_view"),
        CommandSpec("clear", "Remove your persona", key="persona_clear"),
    )),
    CommandSpec("remember", "Reply to a message with this to keep it as a memory",
                only="chat", message_menu="Remember this"),
    CommandSpec("link", "Link your Discord and Telegram accounts", options=(
        OptionSpec("code", "The code you got from /link on your other account"),)),
    CommandSpec("forgetme", "Delete everything stored about you (asks first)"),
    CommandSpec("checkins", "Let me write first after you've been away a while, or not", options=(
        OptionSpec("state", "on: I may write first after a while; off: I never do", required=True,
                   choices=("on", "off")),), only="chat"),
    CommandSpec("timezone", "Your time zone, for reminders and the time: /timezone Europe/Paris", options=(
        OptionSpec("zone", "An IANA time zone name, like Europe/Paris or America/New_York"),)),
    CommandSpec("reminders", "Your reminders with their times; /reminders cancel <n> cancels one", options=(
        OptionSpec("action", "list (the default), or cancel one", choices=("list", "cancel")),
        OptionSpec("n", "The number of the reminder to cancel, as /reminders shows it", "number", low=1)),
        only="chat"),
    CommandSpec("scene", "Who is in this group's scene; /scene invite <character> or /scene dismiss <character>",
                options=(
        OptionSpec("action", "list (the default), invite a character, or dismiss one",
                   choices=("list", "invite", "dismiss")),
        OptionSpec("character", "The character to invite or dismiss")), only="chat"),
    CommandSpec("image", "A picture from the character: /image <what to draw>", options=(
        OptionSpec("scene", "What to draw", required=True, rest=True),), only="chat"),
    CommandSpec("usage", "Your tokens today and this month, against your daily allowance"),
    CommandSpec("stats", "For the bot's owner: turns, tokens and people, today and the last 7 days"),
    CommandSpec("help", "How I work", only="text_commands"),
)


def commands_for(platform: str) -> list[CommandSpec]:
    """The top-level commands a platform shows."""
    return [spec for spec in TABLE if spec.offered_on(platform)]


def leaves() -> dict[str, CommandSpec]:
    """Every command that runs, by the name the core runs it by (`view`, `link`, `persona_view`):
    a group's subcommands stand for it."""
    return {leaf.handler: leaf for spec in TABLE for leaf in (spec.subcommands or (spec,))}


def help_text(platform: str) -> str:
    """One line a command: `/memory edit <id> <text> — change a memory`."""
    lines = []
    for spec in commands_for(platform):
        for leaf, path in ([(sub, f"{spec.name} {sub.name}") for sub in spec.subcommands] or [(spec, spec.name)]):
            usage = leaf.usage()
            head = f"/{path}{' ' + usage if usage else ''}"
            text = leaf.help or leaf.description
            lines.append(f"{head} — {text[0].lower()}{text[1:]}")
    return "\n".join([*lines, SCENE_HELP])


def parse_text(spec: CommandSpec, path: str, args: str) -> dict[str, Any]:
    """The options of `spec` from the words after it, e.g. `/memory add scope:global I like tea`.

    An option may be written `name:value` before the others, or after a text that takes the rest
    of the line (`/memory add I like tea scope:global`, as /help writes it); then the options
    follow in their order: an optional choice or number is taken only when the word is one, a
    `rest` option takes the rest of the line. Words nobody takes are a usage error naming the
    command's form."""
    options: dict[str, Any] = {}
    by_name = {option.name: option for option in spec.options}

    def took(word: str, after_text: bool = False) -> bool:
        """Whether `word` is `name:value` (or `name=value`) of an option not given yet, and so
        taken; `after_text`: one that follows the text, never the text's own."""
        name, sep, value = word.replace("=", ":", 1).partition(":")
        option = by_name.get(name.lower())
        if not (sep and value and option) or option.name in options or (after_text and option.rest):
            return False
        options[option.name] = value
        return True

    text = args.strip()
    while text and took(text.partition(" ")[0]):  # leading name:value words
        text = text.partition(" ")[2].strip()
    if any(option.rest for option in spec.options):  # and trailing ones, after a text
        while " " in text and took(text.rpartition(" ")[2], after_text=True):
            text = text.rpartition(" ")[0].strip()
    for option in spec.options:
        if option.name in options or not text:
            continue
        word, _, after = text.partition(" ")
        if option.rest:
            options[option.name], text = text, ""
        elif option.keyword:
            if word.lower() == option.name:
                value, _, text = after.strip().partition(" ")
                options[option.name] = value
                text = text.strip()
        elif option.required or _looks_like(option, word) or _only_word(spec):
            options[option.name] = word.lower() if word.lower() in option.choices else word
            text = after.strip()
    if text:
        takes = [_described(option) for option in spec.options if option.in_usage]
        raise UsageError(f"/{path} takes {listed(takes) or 'no arguments'}, not “{text[:40]}”.")
    return options


def _described(option: OptionSpec) -> str:
    """`a scope (character or global)`, `a page number`, `an id number`."""
    article = "an" if option.name[0] in "aeiou" else "a"
    if option.choices:
        return f"{article} {option.name} ({' or '.join(option.choices)})"
    return f"{article} {option.name} number" if option.kind == "number" else f"{article} {option.name}"


def _only_word(spec: CommandSpec) -> bool:
    """Whether the command takes one word at most (then a wrong word goes to its option, whose
    check says what is wrong: `/memory save abc`)."""
    return sum(not option.keyword for option in spec.options) == 1


def _looks_like(option: OptionSpec, word: str) -> bool:
    """Whether an optional option takes this word (so `/memory view 2` is page 2)."""
    if option.marked:
        return word.startswith(option.marked) and parse_number(word[len(option.marked):]) is not None
    if option.choices:
        return word.lower() in option.choices
    if option.kind == "number":
        return parse_number(word) is not None
    return True


def check_options(spec: CommandSpec, options: dict[str, Any]) -> str | None:
    """What is wrong with typed options (a Discord slash command), if anything."""
    unknown = sorted(set(options) - {option.name for option in spec.options})
    if unknown:
        return f"/{spec.name} has no option {unknown[0][:40]}."
    return None
