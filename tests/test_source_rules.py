"""Rules of the spec that live in how the code is written, checked on the source itself."""

import ast
from pathlib import Path

from tests.conftest import ROOT


def sources() -> list[Path]:
    return sorted(path for folder in ("bot", "adapters", "storage") for path in (ROOT / folder).rglob("*.py"))


def test_secrets_are_compared_in_constant_time():
    """SPEC 9: secrets are compared in constant time (hmac.compare_digest): no `==` or `!=` has a
    secret (a name holding "secret" or "token") on either side."""
    found = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)):
                continue
            names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
            names += [n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)]
            if any(word in name.lower() for name in names for word in ("secret", "token")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
    assert "hmac.compare_digest(" in (ROOT / "adapters" / "telegram.py").read_text()
