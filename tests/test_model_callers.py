"""#46: who may cause a model call is decided in the one gate, for every caller. This lists every
place in bot/ that calls the model server (chat completions, transcription, speech, embeddings)
and where the gate is asked before it; a new caller fails here until it is placed, and a caller
on a person's behalf whose path no longer asks the gate fails too."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL_CALLS = {"complete", "transcribe", "speak", "embed"}

# module -> where the gate decides before its calls (a function that must ask `self.gate.…`),
# or why no person's allowance is at stake.
ON_A_PERSONS_BEHALF = {
    "bot/turn/handler.py": [  # messages (the limit taken as the message is stored), replies, chains, regenerations
        ("TurnHandler", "_answer", "hold"), ("TurnHandler", "regenerate", "admit"),
        ("Arrival", "store_and_queue", "limit_for")],
    "bot/voice/listening.py": [("Arrival", "_keep_to_hear", "admit")],  # hearing a voice note
    "bot/memory/drafting.py": [("DraftCommands", "_take_call", "admit")],  # /memory generate, Draft with AI
    # the character's own message (a check-in, a reminder's letter), written in the outbox after its gate
    "bot/writing_first/outbox.py": [("Outbox", "post", "admit")],
}
THE_OWNERS = {
    "bot/memory/summaries.py": "summaries of what was said; a rebuild a person asks for takes a call "
                               "(SummaryCommands._take_call) and is charged to them",
    "bot/memory/semantic.py": "embeddings for recall, the owner's upkeep",
    "bot/voice/speaking.py": "speaking a reply the gate already let through",
}
WHERE = {"TurnHandler": "bot/turn/handler.py", "Arrival": "bot/turn/arrival.py", "DraftCommands": "bot/commands/drafts.py",
         "Outbox": "bot/writing_first/outbox.py", "SummaryCommands": "bot/commands/summary.py"}


def model_callers() -> set[str]:
    found = set()
    for path in (ROOT / "bot").rglob("*.py"):
        if path.parts[-2] == "model":  # the client itself
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MODEL_CALLS \
                    and any(name in ast.unparse(node.func.value) for name in ("llm", "server")):
                found.add(path.relative_to(ROOT).as_posix())
    return found


def gate_calls(class_name: str, function: str) -> set[str]:
    tree = ast.parse((ROOT / WHERE[class_name]).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    body = next(n for n in cls.body if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef) and n.name == function)
    return {node.func.attr for node in ast.walk(body) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) == "self.gate"}


def test_every_caller_of_the_model_is_placed_and_the_persons_pass_the_gate():
    assert model_callers() == set(ON_A_PERSONS_BEHALF) | set(THE_OWNERS)
    for module, places in ON_A_PERSONS_BEHALF.items():
        for class_name, function, asked in places:
            assert asked in gate_calls(class_name, function), f"{module}: {class_name}.{function} asks no gate"
    assert "admit" in gate_calls("SummaryCommands", "_take_call")  # /memory rebuild
