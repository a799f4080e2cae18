"""A reply in the character's own voice (bot/turn/own_voice.py): never the person's lines,
never its own name before it; what streams on screen is always the start of what is kept."""

import pytest

from bot.turn.own_voice import OwnVoice

MIRA_TO_ANN = OwnVoice("Mira", ["Ann", "Mira"])


@pytest.mark.parametrize("reply, kept", [
    ("Tea?\nAnn: yes please\nMira: Good.", "Tea?"),
    ("Tea?\n\n**ANN:** yes", "Tea?"),  # whatever its case, in bold
    ("Tea?\n  ann : yes", "Tea?"),
    ("Tea? Ann: said nothing", "Tea? Ann: said nothing"),  # a line in her name, not a word
    ("Tea?\nAnnie: hi", "Tea?\nAnnie: hi"),  # another name
    ("Ann: hi there", "Ann: hi there"),  # all there is: kept, never nothing
])
def test_a_reply_ends_before_the_first_line_in_the_persons_name(reply, kept):
    assert MIRA_TO_ANN.kept(reply) == kept


@pytest.mark.parametrize("reply, kept", [
    ("Mira: Tea?", "Tea?"),
    ("**Mira:** *She looks up.* Tea?", "*She looks up.* Tea?"),
    ("  mira:Tea?", "Tea?"),
    ("*Mira looks up.* Tea?", "*Mira looks up.* Tea?"),  # her name in the story, not before it
])
def test_a_reply_is_kept_without_the_characters_own_name_before_it(reply, kept):
    assert MIRA_TO_ANN.kept(reply) == kept


@pytest.mark.parametrize("reply, last_shown", [
    ("Mira: Then no cake, Ann.\nAnn: fine\nMira: good", "Then no cake, Ann."),
    ("**Mira:** Tea?\n\n**Ann:** yes", "Tea?"),
    ("  Hello there.\nAn apple a day keeps the doctor away.", "Hello there.\nAn apple a day keeps the doctor away."),
    ("*Mira looks up.* Annie came by.\nAnn", "*Mira looks up.* Annie came by."),  # "Ann" might have gone on as "Ann:"
])
def test_what_streams_is_never_taken_back_and_is_the_start_of_what_is_kept(reply, last_shown):
    shown = [MIRA_TO_ANN.shown(reply[:end]) for end in range(len(reply) + 1)]
    assert all(later.startswith(earlier) for earlier, later in zip(shown, shown[1:]))
    assert shown[-1] == last_shown and MIRA_TO_ANN.kept(reply).startswith(last_shown)
