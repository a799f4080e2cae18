"""`python -m bench.report` rewrites docs/benchmarks.md from one run, and keeps what that run
cannot measure as an earlier run or a person measured it, with its date (issue #67's "Done
means": every figure from one run, the by-hand sections marked with their date)."""

from bench.sections import DIALOGUES, kept_sections, measured_before

EARLIER = """# Benchmarks

## 1. Turn overhead — `python -m bench.turn_overhead`

old figures

{dialogues}

Measured by hand 2026-12-07: 76.3 % of the evidence.

## A by-hand section — by hand

Measured 2026-12-06.
"""


def test_a_run_without_locomos_data_keeps_section_9_as_it_was_measured_before(tmp_path):
    earlier = tmp_path / "benchmarks.md"
    earlier.write_text(EARLIER.format(dialogues=DIALOGUES))
    assert measured_before(earlier, DIALOGUES) == ["Measured by hand 2026-12-07: 76.3 % of the evidence."]
    assert measured_before(earlier, "## 4. Nothing of the kind") is None
    assert measured_before(tmp_path / "none.md", DIALOGUES) is None


def test_the_sections_a_run_does_not_write_are_kept_as_they_were(tmp_path):
    earlier = tmp_path / "benchmarks.md"
    earlier.write_text(EARLIER.format(dialogues=DIALOGUES))
    written = {"## 1. Turn overhead — `python -m bench.turn_overhead`", DIALOGUES}
    assert kept_sections(earlier, written) == ["## A by-hand section — by hand\n\nMeasured 2026-12-06.\n"]
