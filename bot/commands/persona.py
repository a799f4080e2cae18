"""`/persona set|view|clear` (SPEC 17): who a person is in the story — one persona a person,
across characters, chats and linked accounts. The prompt carries it as data about them
(bot/turn/prompt.py), only in their own turns."""

from __future__ import annotations

from bot.commands.base import Person, UsageError
from bot.contract import CommandContext, CommandResult
from bot.model.tokens import TokenCounter
from bot.text import clean_text, length_problem
from storage.ports import People, Persona

MAX_PERSONA = 1_000  # characters
NO_PERSONA = ("You have no persona yet. /persona set <text> tells every character who you are in the story: "
              "your name, looks, role.")


class PersonaCommands:
    def __init__(self, people: People, counter: TokenCounter):
        self.people = people
        self.counter = counter
        self.commands = {"persona_set": self.set, "persona_view": self.view, "persona_clear": self.clear}
        self.presses = {}

    async def set(self, ctx: CommandContext, person: Person, text: str = "") -> CommandResult:
        text = clean_text(text).strip()
        if problem := length_problem(text, MAX_PERSONA, what="That persona", empty=(
                "Write who you are after /persona set, e.g. /persona set I'm Ann, a sailor with a scar over one eye.")):
            raise UsageError(problem)
        await self.people.set_persona(person.id, Persona(text, self.counter.count(text)))
        return CommandResult(f"Your persona is set. Every character will know you as:\n{text}")

    async def view(self, ctx: CommandContext, person: Person) -> CommandResult:
        persona = await self.people.persona(person.id)
        return CommandResult(f"Your persona:\n{persona.text}" if persona else NO_PERSONA)

    async def clear(self, ctx: CommandContext, person: Person) -> CommandResult:
        had = await self.people.persona(person.id)
        await self.people.set_persona(person.id, None)
        return CommandResult("Your persona is gone." if had else NO_PERSONA)
