"""A deterministic, extractive stand-in for the summarizing model, served by ScriptedLLM.

Summary prompts get back the input lines that carry a `!` (the tests mark facts that matter
that way) plus `[verbatim]` lines, and nothing else; drafting prompts get a JSON array. Chat turns
fall through to the server's default reply. So the tests measure the memory pipeline, not a model.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.llm_server import Step, text

SUMMARY_OPENINGS = ("You keep the memory of a conversation", "You keep the long-term memory")


def kind_of(body: dict[str, Any]) -> str:
    system = body["messages"][0]["content"] if body["messages"] else ""
    if system.startswith(SUMMARY_OPENINGS):
        if "Merge them" in system:
            return "merge"
        if "Condense them into one timeline entry" in system:
            return "fold"
        if "grown too long" in system:
            return "compact"
        return "batch"
    if system.startswith("What should"):
        return "generate"
    if system.startswith("A person chose the messages"):
        return "draft"
    return "chat"


def extract(source: str) -> str:
    kept = []
    for line in source.splitlines():
        line = line.strip()
        if ("!" in line or line.startswith("[verbatim]")) and line not in kept:
            kept.append(line if line.startswith(("- ", "[verbatim]")) else f"- {line}")
    return "\n".join(kept) or "- (nothing of note)"


def extractive(body: dict[str, Any]) -> Step | None:
    kind = kind_of(body)
    user = body["messages"][-1]["content"]
    if kind in ("batch", "merge", "fold"):
        return text(extract(user))
    if kind == "compact":
        return text("- Period overview: " + "; ".join(
            line[2:] for line in extract(user).splitlines() if line.startswith("- ")))
    if kind in ("generate", "draft"):
        sentences = [s.strip() for s in user.replace("\n", ". ").split(".") if s.strip()]
        return text(json.dumps(sentences[:5]))
    return None
