"""`dice` (SPEC 18): dice in standard notation — `2d6+1`, `d20`, `4d6-2` — drawn by the machine
(never by the model), shown as rolled ("🎲 2d6+1 → 9"). At most MAX_DICE dice of at most
MAX_SIDES sides a roll."""

from __future__ import annotations

import random
import re
from typing import Any, Callable

from bot.tools.toolbox import Outcome, TurnScope, result

MAX_DICE = 100
MAX_SIDES = 1000
MAX_NOTATION = 40  # characters, once the spaces are taken out: "100d1000+1000" is 13
NOTATION = re.compile(r"(\d{0,6})[dD](\d{1,6})(?:([+-])(\d{1,6}))?")
SPEC = {
    "type": "function",
    "function": {
        "name": "dice",
        "description": "Roll dice for real, in standard notation such as 2d6+1, d20 or 4d6-2. "
                       "Use it whenever the person asks for a roll; never make up a result.",
        "parameters": {
            "type": "object",
            "properties": {"notation": {"type": "string", "description": "e.g. 2d6+1"}},
            "required": ["notation"],
        },
    },
}


def parse(notation: str) -> tuple[int, int, int] | str:
    """(dice, sides, modifier), or why the notation cannot be rolled."""
    written = "".join(notation.split())  # no spaces left for a pattern to try in every way (linear time)
    found = NOTATION.fullmatch(written) if len(written) <= MAX_NOTATION else None
    if found is None:
        return "write the dice in standard notation, like 2d6+1 or d20"
    count, sides = int(found[1] or 1), int(found[2])
    modifier = int(found[4] or 0) * (-1 if found[3] == "-" else 1)
    if not 1 <= count <= MAX_DICE:
        return f"roll 1 to {MAX_DICE} dice at once"
    if not 2 <= sides <= MAX_SIDES:
        return f"a die has 2 to {MAX_SIDES} sides"
    return count, sides, modifier


class Dice:
    name, spec, guidance = "dice", SPEC, ""
    local = True  # drawn here

    def __init__(self, draw: Callable[[int, int], int] = random.SystemRandom().randint):
        self.draw = draw

    def offered(self, scope: TurnScope) -> bool:
        return True

    async def run(self, scope: TurnScope, arguments: dict[str, Any]) -> str | Outcome:
        notation = arguments.get("notation")
        parsed = parse(notation) if isinstance(notation, str) else "notation must be text, like 2d6+1"
        if isinstance(parsed, str):
            return result(error=parsed)
        count, sides, modifier = parsed
        rolls = [self.draw(1, sides) for _ in range(count)]
        total = sum(rolls) + modifier
        written = f"{count}d{sides}" + (f"{modifier:+d}" if modifier else "")
        return Outcome(result(notation=written, rolls=rolls, modifier=modifier, total=total),
                       shown=f"🎲 {written} → {total}")
