"""The toolbox (SPEC 18 "One toolbox, one gate", #49): a tool is one module — a name, a schema, a
run — added at start-up without touching the turn (bot/turn/); the memory tools are its first
residents; every call is asked of the gate; what the model got wrong is an error result."""

import ast
import json
import random

from bot.config import parse_config
from bot.contract import Asker
from bot.model.tokens import TokenCounter
from bot.runtime import build_runtime
from bot.tools.toolbox import Toolbox, TurnScope, result
from tests.conftest import ROOT, Chat, config_dict
from tests.fakes.llm_server import text, tool_calls


class Dice:
    """A tool a test adds: rolls dice written like 2d6, drawn from a seeded generator."""

    name = "roll_dice"
    spec = {"type": "function", "function": {
        "name": "roll_dice", "description": "Roll dice, e.g. 2d6.",
        "parameters": {"type": "object", "properties": {"notation": {"type": "string"}}, "required": ["notation"]}}}
    guidance = "Roll dice with roll_dice when the person asks for a roll."
    local = True  # drawn here: its answers are our own words (a tool that does not say so is fenced)

    def __init__(self) -> None:
        self.rng = random.Random(6)
        self.rolled: list[TurnScope] = []

    def offered(self, scope: TurnScope) -> bool:
        return True

    async def run(self, scope: TurnScope, arguments: dict) -> str:
        count, _, sides = str(arguments.get("notation", "")).partition("d")
        if not (count.isdigit() and sides.isdigit()):
            return result(error="write the dice like 2d6")
        self.rolled.append(scope)
        faces = [self.rng.randint(1, int(sides)) for _ in range(int(count))]
        return result(ok=True, faces=faces, total=sum(faces))


async def test_a_tool_added_at_start_up_is_offered_and_run_without_touching_the_turn(llm, tmp_path, clock):
    dice = Dice()
    raw = config_dict(llm.base_url, tmp_path / "k.sqlite3") | {"tools": {"enabled": []}}  # no built-in ones
    runtime = await build_runtime(parse_config(raw, tmp_path), clock=clock, tools=[dice])
    try:
        ann = Chat(runtime, platform="telegram")
        llm.add(tool_calls(("roll_dice", {"notation": "2d6"})), text("Seven — the harbour gods smile."))
        reply = await ann.say("roll 2d6 for me")
        assert reply.text == "Seven — the harbour gods smile."
        offered = [spec["function"]["name"] for spec in llm.requests[0]["tools"]]
        assert offered == ["save_memory", "update_memory", "delete_memory", "roll_dice"]
        assert "Roll dice with roll_dice" in llm.requests[0]["messages"][0]["content"]
        rolled = json.loads(next(m for m in llm.requests[1]["messages"] if m["role"] == "tool")["content"])
        assert rolled["ok"] and len(rolled["faces"]) == 2 and rolled["total"] == sum(rolled["faces"])
        scope, = dice.rolled  # the turn's scope: the speaker from the platform event, the answering character
        assert scope.person_id == await ann.person_id() and scope.character_name == "Mira"

        await ann.memory("/memory learning off")  # the memory tools leave; the dice stay
        llm.add(text("No dice this time."))
        await ann.say("just talk")
        assert [spec["function"]["name"] for spec in llm.requests[-1]["tools"]] == ["roll_dice"]
        assert "save_memory" not in llm.requests[-1]["messages"][0]["content"]
    finally:
        await runtime.close()


async def test_every_tool_call_is_asked_of_the_gate_and_bad_arguments_are_an_error_result():
    dice = Dice()
    refusal = "Mira is an age-restricted character and does not talk on Telegram here."

    async def gate(path, person_id, character, character_id, asker):
        return refusal if asker is None or asker.user_id == "zed" else None

    box = Toolbox([dice], gate, TokenCounter("gpt-4o-mini"))
    ann = box.for_turn(TurnScope(1, 7, 1, "Mira", Asker("telegram", "ann"), 0.0, True))
    zed = box.for_turn(TurnScope(2, 8, 1, "Mira", Asker("telegram", "zed"), 0.0, True))
    assert json.loads(await zed.run("roll_dice", '{"notation": "1d20"}')) == {
        "error": f"roll_dice may not be used now: {refusal}"}
    assert dice.rolled == []
    assert "not valid JSON" in json.loads(await ann.run("roll_dice", "{2d6"))["error"]
    assert json.loads(await ann.run("roll_dice", "[1, 2]")) == {"error": "arguments must be a JSON object"}
    assert json.loads(await ann.run("fireball", "{}")) == {"error": "unknown tool 'fireball'"}
    assert json.loads(await ann.run("roll_dice", '{"notation": "many"}')) == {"error": "write the dice like 2d6"}


def test_the_turn_knows_tools_only_through_the_toolbox():
    """bot/turn/ imports no tool: a new tool is a module and a line where the toolbox is built."""
    for path in (ROOT / "bot" / "turn").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module == "bot.tools.toolbox" or not (
                    node.module.startswith("bot.tools") or node.module == "bot.memory.tools"), (path.name, node.module)
