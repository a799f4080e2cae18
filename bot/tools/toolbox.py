"""The toolbox (SPEC 18 "One toolbox, one gate"): every tool the model may call, offered and run
the same way, whatever it does.

- A `Tool` has a name, its JSON schema (an OpenAI "function"), whether it is offered in a turn
  (`offered`: the memory tools only when the speaker is a person who lets the character learn),
  and a `run` that gets the turn's `TurnScope` and its arguments and returns what the model reads.
- `TurnScope` is everything a tool may know of the turn: its id (effects are journaled under it,
  so Regenerate undoes them), the person the turn is for (from the platform event, never from the
  model), the answering character, who asks and where, the clock — and per-turn counts (a cap
  such as "at most 5 memory writes a turn" is kept there).
- The `Toolbox` is built once at start-up; `for_turn(scope)` gives the turn's `TurnTools`: the
  specs to offer, and `run(name, raw arguments)`, which parses the arguments, asks the gate for
  the answering character and the person (access, age rule, allowance), runs the tool, and turns
  bad arguments or a failing tool into an error result the model can read — never an exception.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol, Sequence

from bot.contract import Asker

log = logging.getLogger(__name__)
MAX_TOOL_ROUNDS = 3  # model calls that may ask for tools in one turn; the last round answers in words

# Why a tool call may not run now (the gate's words), or None: (person id, character name, asker).
ToolGate = Callable[[int | None, str, Asker | None], Awaitable[str | None]]


@dataclass(frozen=True)
class TurnScope:
    """One turn, as its tools see it."""

    turn_id: int
    person_id: int | None  # whose turn: the speaker, from the platform event (None: nobody in particular)
    character_id: int
    character_name: str
    asker: Asker | None
    now: float
    learning: bool  # the person lets this character learn (Learn from chat)
    counts: dict[str, int] = field(default_factory=dict, compare=False)  # per-turn caps, by name


def guidance_of(tools: Sequence["Tool"]) -> str:
    """How to use these tools, for the system prompt: each tool's text once ("" with none)."""
    return " ".join(dict.fromkeys(tool.guidance for tool in tools if tool.guidance))


def result(**fields: Any) -> str:
    """A tool's answer to the model, as JSON."""
    return json.dumps(fields)


class Tool(Protocol):
    name: str
    spec: dict[str, Any]  # {"type": "function", "function": {"name", "description", "parameters"}}
    guidance: str  # how to use it, for the system prompt ("" for none; tools may share one)

    def offered(self, scope: TurnScope) -> bool:
        """Whether the model is offered this tool in this turn."""

    async def run(self, scope: TurnScope, arguments: dict[str, Any]) -> str:
        """Do it; what the model reads (an error result, never an exception, for what it got wrong)."""


class TurnTools:
    """The tools of one turn."""

    def __init__(self, tools: Sequence[Tool], scope: TurnScope, gate: ToolGate):
        self.tools = {tool.name: tool for tool in tools if tool.offered(scope)}
        self.scope = scope
        self.gate = gate

    @property
    def specs(self) -> list[dict[str, Any]]:
        return [tool.spec for tool in self.tools.values()]

    @property
    def guidance(self) -> str:
        """How to use the tools offered ("" with none offered)."""
        return guidance_of(list(self.tools.values()))

    async def run(self, name: str, raw_arguments: str | None) -> str:
        tool = self.tools.get(name)
        if tool is None:
            return result(error=f"unknown tool {name!r}")
        try:
            arguments = json.loads(raw_arguments or "{}")
        except json.JSONDecodeError as exc:
            return result(error=f"arguments are not valid JSON ({exc.msg}); call {name} again with a JSON object")
        if not isinstance(arguments, dict):
            return result(error="arguments must be a JSON object")
        if refusal := await self.gate(self.scope.person_id, self.scope.character_name, self.scope.asker):
            return result(error=f"{name} may not be used now: {refusal}")
        try:
            return await tool.run(self.scope, arguments)
        except Exception:  # the reply goes on; the model reads that the tool failed
            log.exception("tool %s failed", name)
            return result(error=f"{name} failed on our side; do not retry it this turn")


class Toolbox:
    """Every tool characters may use, built once at start-up."""

    def __init__(self, tools: Sequence[Tool], gate: ToolGate):
        self.tools = list(tools)
        self.gate = gate

    def for_turn(self, scope: TurnScope) -> TurnTools:
        return TurnTools(self.tools, scope, self.gate)
