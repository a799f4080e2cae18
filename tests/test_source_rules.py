"""Rules of the spec that live in how the code is written, checked on the source itself (in a
fresh interpreter: the AST is parsed apart from the test process)."""

import subprocess
import sys

from tests.conftest import ROOT

SECRETS_COMPARED = r'''
import ast, sys
from pathlib import Path

root = Path(sys.argv[1])
for path in sorted(p for folder in ("bot", "adapters", "storage") for p in (root / folder).rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)):
            continue
        names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
        names += [n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)]
        if any(word in name.lower() for name in names for word in ("secret", "token")):
            print(f"{path.relative_to(root)}:{node.lineno}")
'''


def test_secrets_are_compared_in_constant_time():
    """SPEC 9: secrets are compared in constant time (hmac.compare_digest): no `==` or `!=` has a
    secret (a name holding "secret" or "token") on either side."""
    found = subprocess.run([sys.executable, "-c", SECRETS_COMPARED, str(ROOT)], capture_output=True, text=True,
                           timeout=60)
    assert found.returncode == 0, found.stderr
    assert found.stdout.split() == []
    assert "hmac.compare_digest(" in (ROOT / "adapters" / "telegram" / "transport.py").read_text()
