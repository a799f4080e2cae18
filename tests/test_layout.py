"""The house rules of the tree (STYLE, issue #40), checked on the source: the layers, no import
cycles, folders by subject, small adapters, handles parsed in one place."""

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("bot", "adapters", "storage")
ENTRY = {"bot.__main__", "bot.cli"}  # the entry point picks the adapters


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every project module `name` imports, anywhere in it (inside functions and under
    TYPE_CHECKING too: a circle only for annotations is still a circle to a reader)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


MODULES = _modules()
GRAPH = {name: _imports(name, path, set(MODULES)) for name, path in MODULES.items()}


def _third_party(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_core_never_imports_discord_or_telegram():
    for name, path in MODULES.items():
        if name.startswith("bot."):
            assert not _third_party(path) & {"discord", "telegram"}, name


def test_adapters_know_only_the_contract_of_the_core():
    for name, deps in GRAPH.items():
        if name.startswith("adapters"):
            assert {d for d in deps if d.startswith("bot")} <= {"bot.contract"}, name


def test_storage_imports_nothing_above_it_and_the_core_no_adapter():
    for name, deps in GRAPH.items():
        if name.startswith("storage"):
            assert not {d for d in deps if d.split(".")[0] in ("bot", "adapters")}, name
        if name.startswith("bot") and name not in ENTRY:
            assert not {d for d in deps if d.startswith("adapters")}, name


def test_no_module_imports_itself_back_through_others():
    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for dep in GRAPH[todo.pop()]:
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    assert [name for name in GRAPH if name in reaches(name)] == []


def test_scenes_check_ins_and_commands_do_not_import_the_turn_handler():
    for name, deps in GRAPH.items():
        if name in ("bot.scenes", "bot.writing_first.checkins") or name.startswith("bot.commands"):
            assert "bot.turn.handler" not in deps, name


def test_at_most_15_modules_sit_directly_in_bot():
    assert len(list((ROOT / "bot").glob("*.py"))) <= 15


def test_no_adapter_module_is_over_500_lines():
    for path in (ROOT / "adapters").rglob("*.py"):
        assert len(path.read_text().splitlines()) <= 500, path.relative_to(ROOT)


def test_handles_are_read_in_one_place_never_split_on_colons():
    """A turn is a `TurnRef` and button data goes through one codec (bot/buttons.py)."""
    for path in (ROOT / "bot").rglob("*.py"):
        text = path.read_text()
        assert 'split(":")' not in text and "split(':')" not in text, path.relative_to(ROOT)


FACADES = {"Store", "Core"}  # made of ports (protocols) on purpose: `store.turns`, `core.conversation`


def _type_name(annotation: ast.expr | None) -> str | None:
    if isinstance(annotation, ast.Name):
        return annotation.id
    if isinstance(annotation, ast.Attribute):
        return annotation.attr
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.split("[")[0].rpartition(".")[2]
    return None


def _collaborators(cls: ast.ClassDef) -> dict[str, str | None]:
    """What a class is handed at construction and keeps (`self.x = x`, or several at once): the
    attribute's name and its parameter's annotated class."""
    init = next((f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == "__init__"),
                None)
    if init is None:
        return {}
    params = {arg.arg: _type_name(arg.annotation) for arg in [*init.args.args, *init.args.kwonlyargs]}
    kept = {}
    for node in ast.walk(init):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple) and isinstance(
                node.value, ast.Tuple) else [(target, node.value)]
            for attribute, value in pairs:
                if (isinstance(attribute, ast.Attribute) and isinstance(attribute.value, ast.Name)
                        and attribute.value.id == "self" and isinstance(value, ast.Name) and value.id in params):
                    kept[attribute.attr] = params[value.id]
    return kept


def test_nothing_reaches_through_one_service_into_another():
    """#49, #64: an object calls what it was handed, never what its collaborators were handed
    (`self.gate.budgets.spend(…)`, `self.due.store.reminders.drop(…)`): it takes those itself. Read
    from the source: for every class in bot/ and adapters/, the collaborators its constructor keeps
    and their annotated classes; a call through `self.<collaborator>.<its collaborator>` is a
    reach-through (the store and the core are made of ports on purpose, and are exempt)."""
    classes = {}
    for package in ("bot", "adapters"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    classes[node.name] = (path, node)
    handed = {name: _collaborators(cls) for name, (_, cls) in classes.items()}
    reaching = []
    for name, (path, cls) in classes.items():
        for call in ast.walk(cls):
            if not isinstance(call, ast.Call):
                continue
            through = call.func.value if isinstance(call.func, ast.Attribute) else call.func
            while isinstance(through, ast.Attribute) and isinstance(through.value, ast.Attribute):
                if isinstance(through.value.value, ast.Name) and through.value.value.id == "self":
                    kind = handed[name].get(through.value.attr)
                    if kind in handed and kind not in FACADES and through.attr in handed[kind]:
                        reaching.append(f"{path.relative_to(ROOT)}:{call.lineno} "
                                        f"self.{through.value.attr}.{through.attr}")
                through = through.value
    assert reaching == []


def test_one_module_sends_what_a_character_writes_first():
    """#49: claim, gate, compose, store unshown, send, mark shown, take back — written once, in
    bot/writing_first/outbox.py; a check-in (and a reminder next) is a source of it."""
    senders = {path.relative_to(ROOT).as_posix() for path in (ROOT / "bot").rglob("*.py")
               if ".write_first(" in path.read_text()}
    assert senders == {"bot/writing_first/outbox.py"}


def test_no_class_in_bot_or_adapters_has_more_than_20_public_methods():
    """#49: the core is one small service per protocol of the contract, not one class of 34; #64:
    an adapter too (TelegramAdapter had 33): its platform's handlers are its own business."""
    too_big = {}
    for path in [*(ROOT / "bot").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                public = [item.name for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                          and not item.name.startswith("_")]
                if len(public) > 20:
                    too_big[f"{path.relative_to(ROOT)}:{node.name}"] = len(public)
    assert too_big == {}


def test_every_path_asks_the_gate_for_one_verdict():
    """#64: a path asks `Gate.admit(path, …)` once, as a stage; besides it the gate is asked only
    how much may be spent (the allowance's hold, spend — or its cost, charged apart —, take, past)
    and two questions of its own kind — `lets_in`, what an adapter asks before it stores an event
    (bot/core.py's Gatekeeper), and `denies`, what the memory page asks of a person's accounts. No
    path assembles a verdict from the gate's rules itself."""
    spending = {"hold", "spend", "cost", "charge", "take", "past", "past_allowance", "allowance_notice", "limit_for",
                "per_minute"}
    own_kind = {"lets_in": {"bot/core.py"}, "denies": {"bot/page/desk.py"}, "names_roles": {"bot/core.py"}}
    asked = []
    for path in (ROOT / "bot").rglob("*.py"):
        where = path.relative_to(ROOT).as_posix()
        if where.startswith("bot/access/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), where)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            called, on = node.func.attr, node.func.value
            if (isinstance(on, ast.Attribute) and on.attr == "gate" and called != "admit" and called not in spending
                    and where not in own_kind.get(called, set())):
                asked.append(f"{where}:{node.lineno} gate.{called}")
    assert asked == []


def test_the_days_pictures_are_taken_only_by_the_gates_admission():
    """#64: `[pictures] per_day` is part of the PICTURE path's verdict (bot/access/gate.py); no tool
    or command counts a picture itself."""
    takers = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "bot").rglob("*.py")
                    if "take_picture(" in path.read_text())
    assert takers == ["bot/access/gate.py"]


def test_the_core_names_a_platform_only_in_its_traits():
    """#64: what the core knows of Discord and Telegram (rule kinds, age lines, who writes first,
    typed commands, how messages are picked) is declared by each platform's row in the adapters'
    registry (adapters/registry.py, `PlatformTraits`); no module of the core names a platform in
    its code — besides the entry point, which picks the adapters, and the logging setup, which
    quiets their libraries' loggers. (Words in docstrings, comments and example messages do not
    count: only code that decides.)"""
    allowed = {"bot/cli.py", "bot/logs.py"}
    named = []
    for path in (ROOT / "bot").rglob("*.py"):
        where = path.relative_to(ROOT).as_posix()
        if where in allowed:
            continue
        tree = ast.parse(path.read_text(), where)
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and node.value in ("discord", "telegram", "console")
                    and id(node) not in docstrings):
                named.append(f"{where}:{node.lineno} {node.value!r}")
    assert named == []


def test_a_new_platform_is_a_row_of_traits_and_the_core_asks_them_never_its_name(monkeypatch):
    """#64 item 3: adding Matrix is an adapter and a row — the core takes its rule kinds, its
    commands, who writes first and its words in /link from the traits its row declares."""
    from bot.access.rules import rule_kinds
    from bot.commands.account import _others
    from bot.commands.table import commands_for
    from bot.contract import PLATFORM_TRAITS, PlatformTraits, traits_of

    monkeypatch.setitem(PLATFORM_TRAITS, "matrix", PlatformTraits("matrix", "Matrix", place_rule="matrix-room"))
    assert {"matrix", "matrix-room"} <= set(rule_kinds())
    offered = {spec.name for spec in commands_for("matrix")}
    assert {"memory", "image", "link"} <= offered and "start" not in offered  # commands are not typed there
    assert "Matrix" in _others("telegram") and traits_of("matrix").chat
