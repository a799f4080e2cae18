"""What a new run of `python -m bench.report` keeps of the docs/benchmarks.md it replaces: the
sections it does not write (measured by hand, each with its date), and a section it cannot
measure this time (section 9 without LoCoMo's data), each as it was."""

from __future__ import annotations

import re
from pathlib import Path

DIALOGUES = "## 9. Recall per token on real conversations — `python -m bench.dialogues`"  # needs LoCoMo's data


def earlier_sections(path: Path) -> dict[str, str]:
    """The sections of the earlier file, by heading, each as it was."""
    sections = re.split(r"(?m)^(?=## )", path.read_text())[1:] if path.exists() else []
    return {section.splitlines()[0]: section.rstrip("\n") + "\n" for section in sections}


def kept_sections(path: Path, written: set[str]) -> list[str]:
    """The sections of the earlier file whose headings this run does not write, as they were
    (each says when it was measured)."""
    return [section for heading, section in earlier_sections(path).items() if heading not in written]


def measured_before(path: Path, heading: str) -> list[str] | None:
    """The lines of an earlier section under `heading` (it says when it was measured), for a run
    that cannot measure it; None when there is none."""
    section = earlier_sections(path).get(heading)
    return section.splitlines()[2:] if section is not None else None
