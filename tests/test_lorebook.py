"""SPEC section 13 — a card's lorebook (`character_book`), as SillyTavern users expect it."""

import json
from dataclasses import replace

import pytest

from bot.characters.cards import load_character
from bot.characters.lorebook import ChatSoFar, Lorebook, read_lorebook
from bot.characters.macros import filled
from bot.config import CharacterConfig, ConfigError, parse_config
from bot.runtime import build_runtime
from tests.conftest import Chat, config_dict
from tests.fakes.llm_server import text


def entry(name: str, keys: list[str], content: str = "", **fields) -> dict:
    return {"name": name, "keys": keys, "content": content or f"{name} lore.", "enabled": True,
            "insertion_order": 100, **fields}


def book(*entries: dict, char: str = "", **fields) -> Lorebook:
    return read_lorebook({"entries": list(entries), **fields}, char=char).counted(lambda text: len(text.split()))


def fired(lorebook: Lorebook, *newest_first: str, context_window: int = 128_000, user: str = "") -> list[str]:
    return [e.name for e in lorebook.entries_for(newest_first, context_window, user)]


def test_an_entry_fires_when_a_key_is_said_case_insensitive_and_not_otherwise():
    lore = book(entry("Glade", ["Eldoria"]))
    assert fired(lore, "tell me about ELDORIA") == ["Glade"]
    assert fired(lore, "tell me about the forest") == []


def test_keys_match_whole_words_only():
    lore = book(entry("Cat", ["cat"]))
    assert fired(lore, "a concatenation of things") == []
    assert fired(lore, "the cat, asleep") == ["Cat"]


def test_a_case_sensitive_entry_needs_the_exact_case():
    lore = book(entry("Rose", ["Rose"], case_sensitive=True))
    assert fired(lore, "a rose in bloom") == []
    assert fired(lore, "Rose is here") == ["Rose"]


def test_a_selective_entry_also_needs_a_secondary_key():
    lore = book(entry("Blade", ["sword"], selective=True, secondary_keys=["cursed", "black"]))
    assert fired(lore, "a sword") == []
    assert fired(lore, "the black sword") == ["Blade"]


def test_a_constant_entry_is_always_in_and_a_disabled_one_never():
    lore = book(entry("Always", [], constant=True), entry("Off", ["forest"], enabled=False))
    assert fired(lore, "the forest") == ["Always"]


def test_the_recent_messages_are_scanned_up_to_the_books_scan_depth():
    lore = book(entry("Glade", ["Eldoria"]), scan_depth=2)
    assert fired(lore, "new message", "one before: Eldoria") == ["Glade"]
    assert fired(lore, "new message", "one before", "two before: Eldoria") == []
    assert read_lorebook({"entries": []}).scan_depth == 4  # the default: the new message and 3 before


def test_an_entrys_own_scan_depth_overrides_the_books():
    lore = book(exported("Deep", ["eldoria"], scan_depth=3), exported("Shallow", ["eldoria"], scan_depth=1),
                exported("Book's", ["eldoria"]), scan_depth=2)
    assert fired(lore, "new message", "one before", "two before: Eldoria") == ["Deep"]
    assert fired(lore, "new message", "one before: Eldoria") == ["Deep", "Book's"]


def test_entries_go_in_by_insertion_order_lowest_first():
    lore = book(entry("Late", ["sea"], insertion_order=50), entry("Early", ["sea"], insertion_order=5))
    assert fired(lore, "the sea") == ["Early", "Late"]


def test_over_the_token_budget_lower_priority_entries_are_dropped_first():
    words = " ".join(["word"] * 40)  # 40 "tokens" each with the counting used here
    lore = book(entry("Low", ["sea"], words, priority=1, insertion_order=1),
                entry("High", ["sea"], words, priority=9, insertion_order=2),
                entry("Mid", ["sea"], words, priority=5, insertion_order=3), token_budget=100)
    assert fired(lore, "the sea") == ["High", "Mid"]


def test_the_lorebook_budget_is_1000_tokens_by_default_and_never_over_10_percent_of_the_context():
    lore = read_lorebook({"entries": []})
    assert lore.budget(128_000) == 1_000
    assert lore.budget(4_096) == 409
    assert read_lorebook({"entries": [], "token_budget": 300}).budget(128_000) == 300


def test_a_key_written_as_slash_pattern_slash_flags_is_a_regular_expression():
    lore = book(entry("Year", [r"/\b1[0-9]{3}\b/"]), entry("Bay", [r"/cargo\s*bay\s*\d+/i"], use_regex=True))
    assert fired(lore, "back in 1642") == ["Year"]
    assert fired(lore, "back in 42") == []
    assert fired(lore, "meet me in Cargo Bay 7") == ["Bay"]
    assert fired(lore, "meet me in cargo bay") == []


def test_any_other_key_is_plain_text_even_when_use_regex_is_set():
    """Exporters set `use_regex` on every entry; SillyTavern still reads `*wink*` as words."""
    lore = book(entry("Wink", ["*wink*"], use_regex=True), entry("Dot", ["a.b"], use_regex=True))
    assert fired(lore, "she gives a *wink* and leaves") == ["Wink"]
    assert fired(lore, "axb") == []
    assert fired(lore, "see a.b here") == ["Dot"]


def exported(name: str, keys: list[str], secondary_keys: tuple[str, ...] = (), **extensions) -> dict:
    """An entry shaped as SillyTavern's own export writes it (src/endpoints/characters.js): every
    key marked `use_regex`, its matching in `extensions`, null where the user's own setting rules."""
    return {"id": 0, "keys": keys, "secondary_keys": list(secondary_keys), "comment": name, "content": f"{name} lore.",
            "constant": False, "selective": True, "insertion_order": 100, "enabled": True, "position": "before_char",
            "use_regex": True, "extensions": {"position": 0, "exclude_recursion": False, "display_index": 0,
                                              "probability": 100, "useProbability": True, "depth": 4,
                                              "selectiveLogic": 0, "group": "", "scan_depth": None,
                                              "match_whole_words": None, "case_sensitive": None, **extensions}}


def test_an_entry_sillytavern_exported_as_case_sensitive_needs_the_exact_case(tmp_path):
    path = tmp_path / "june.json"
    path.write_text(json.dumps({"spec": "chara_card_v2", "data": {"name": "June", "character_book": {"entries": [
        exported("The month", ["May"], case_sensitive=True)]}}}))
    lore = load_character(CharacterConfig(name="June", card=path)).lorebook.counted(len)
    assert fired(lore, "you may go now") == []
    assert fired(lore, "see you in May") == ["The month"]


def test_an_entry_that_does_not_match_whole_words_fires_inside_a_longer_word():
    lore = book(exported("Fangs", ["fang"], match_whole_words=False))
    assert fired(lore, "the Shadowfangs came at night") == ["Fangs"]
    assert fired(book(exported("Fangs", ["fang"], match_whole_words=True)), "the Shadowfangs came at night") == []


def test_an_entry_left_to_the_users_own_setting_matches_as_sillytaverns_default_whole_words_any_case():
    lore = book(exported("Cat", ["cat"]))  # match_whole_words and case_sensitive null
    assert fired(lore, "a concatenation of things") == []
    assert fired(lore, "the CAT, asleep") == ["Cat"]


def test_a_key_of_several_words_matches_wherever_it_is_written():
    lore = book(entry("Woods", ["magical forest"]))
    assert fired(lore, "all the magical forests of the north") == ["Woods"]
    assert fired(lore, "a forest, magical and old") == []


@pytest.mark.parametrize("logic, fires_on", [
    (0, ["a black sword", "a black cursed sword"]),  # AND ANY: one of them
    (1, ["a sword", "a black sword"]),  # NOT ALL: not every one of them
    (2, ["a sword"]),  # NOT ANY: none of them
    (3, ["a black cursed sword"]),  # AND ALL: every one of them
])
def test_a_selective_entrys_secondary_keys_follow_its_selective_logic(logic, fires_on):
    lore = book(exported("Blade", ["sword"], ("cursed", "black"), selectiveLogic=logic))
    said = ["a sword", "a black sword", "a black cursed sword", "a black shield"]
    assert [text for text in said if fired(lore, text)] == fires_on


def test_an_entrys_matching_is_read_where_other_editors_write_it():
    """Older exporters write camelCase in `extensions`; SillyTavern's world files and Wyvern, at the top."""
    lore = book(entry("The month", ["May"], extensions={"caseSensitive": True}),
                entry("Fangs", ["fang"], matchWholeWords=False),
                entry("Blade", ["sword"], selective=True, secondary_keys=["black"], selectiveLogic=2),
                # Wyvern's names, at the entry's top
                entry("Wolves", ["wolf"], whole_words_only=False),
                entry("Shield", ["shield"], selective=True, secondary_keys=["black"], key_logic="NOT_ANY"))
    assert fired(lore, "you may go; a sword, a shield") == ["Blade", "Shield"]
    assert fired(lore, "in May the Shadowfangs and a werewolf came with a black sword and a black shield") == [
        "The month", "Fangs", "Wolves"]


def test_an_unknown_selective_logic_reads_as_and_any_and_the_card_still_loads():
    lore = book(exported("Blade", ["sword"], ("black",), selectiveLogic=7),
                exported("Shield", ["shield"], ("black",), selectiveLogic="none"))
    assert fired(lore, "a sword and a shield") == []
    assert fired(lore, "a black sword and a black shield") == ["Blade", "Shield"]


def test_an_entry_named_in_the_text_of_an_entry_called_up_is_called_up_too():
    """SillyTavern scans the text of the entries called up in turn (its default), until none is new."""
    lore = book(entry("Glade", ["glade"], "The glade lies deep in the forest of Eldoria."),
                entry("Eldoria", ["eldoria"], "Eldoria fell to the Shadowfangs; the glade still stands."),
                entry("Shadowfangs", ["shadowfangs"], "Beasts of the dark."),
                entry("Harbour", ["harbour"], "Ships come in at dawn."))
    assert fired(lore, "we rest in the glade") == ["Glade", "Eldoria", "Shadowfangs"]


def test_the_recursive_scan_goes_no_deeper_once_what_it_called_up_fills_the_budget():
    words = " ".join(["word"] * 40)  # 40 "tokens" each with the counting used here
    lore = book(entry("A", ["alpha"], f"{words} beta", insertion_order=1),
                entry("B", ["beta"], f"{words} gamma", insertion_order=2),
                entry("C", ["gamma"], f"{words} delta", insertion_order=3),
                entry("D", ["delta"], words, priority=99, insertion_order=4), token_budget=100)
    assert fired(lore, "alpha") == ["A", "B"]  # C filled the budget: D, three deep, was never looked for


def test_a_book_that_turns_recursive_scanning_off_calls_up_only_what_the_chat_names():
    lore = book(entry("Glade", ["glade"], "The glade lies deep in Eldoria."), entry("Eldoria", ["eldoria"]),
                recursive_scanning=False)
    assert fired(lore, "we rest in the glade") == ["Glade"]


def test_an_entry_that_prevents_recursion_calls_up_nothing_and_one_excluded_from_it_only_answers_the_chat():
    lore = book(exported("Glade", ["glade"], prevent_recursion=True) | {"content": "The glade lies in Eldoria."},
                exported("Eldoria", ["eldoria"]),
                exported("Map", ["map"]) | {"content": "An old map of the Harbour."},
                exported("Harbour", ["harbour"], exclude_recursion=True))
    assert fired(lore, "we rest in the glade and read the map") == ["Glade", "Map"]
    assert fired(lore, "the map shows the harbour") == ["Map", "Harbour"]


def test_an_entry_delayed_until_recursion_is_called_up_only_by_another_entrys_text():
    lore = book(exported("Map", ["map"]) | {"content": "An old map of the Harbour."},
                exported("Harbour", ["harbour"], delay_until_recursion=True))
    assert fired(lore, "the harbour at night") == []
    assert fired(lore, "an old map") == ["Map", "Harbour"]


def test_a_v3_entrys_decorators_never_reach_the_prompt():
    """RisuAI's exports begin entries with Character Card V3 decorators (`@@depth 0`): they are
    the entry's settings, taken out of its text, never words for the model."""
    lore = book(entry("Lamp", ["lamp"], "@@depth 0\n@@role system\n\nThe lamp is lit with whale oil."))
    assert [e.content for e in lore.entries_for(["the lamp"], 128_000)] == ["The lamp is lit with whale oil."]


def test_the_activate_and_dont_activate_decorators_call_an_entry_up_always_or_never():
    lore = book(entry("Always", ["nowhere"], "@@activate\nAlways lore."),
                entry("Never", ["lamp"], "@@dont_activate\nNever lore."),
                entry("Both", ["nowhere"], "@@dont_activate\n@@activate\nBoth lore."))
    assert fired(lore, "the lamp") == ["Always", "Both"]


def test_an_entry_with_a_delay_is_called_up_only_once_the_chat_holds_that_many_messages():
    """SillyTavern's `delay` (its editor writes it in the entry's extensions): the chat's messages,
    the one answered with them; it holds even an entry `@@activate` calls up always."""
    lore = book(entry("Secret", ["lighthouse"], extensions={"delay": 5}),
                entry("Always", [], "@@activate\nAlways lore.", extensions={"delay": 5}), entry("Lamp", ["lighthouse"]))
    assert lore.waits_for() == ChatSoFar(5, 0)
    assert [e.name for e in lore.entries_for(["the lighthouse"], 128_000, chat=ChatSoFar(4, 2))] == ["Lamp"]
    assert [e.name for e in lore.entries_for(["the lighthouse"], 128_000, chat=ChatSoFar(5, 0))] == \
        ["Secret", "Always", "Lamp"]


def test_an_entry_written_activate_only_after_waits_for_that_many_of_the_characters_messages():
    """V3's `@@activate_only_after`: the character's messages of the chat, its greeting too."""
    lore = book(entry("Letter", ["letter"], "@@activate_only_after 3\nThe letter was hers all along."))
    assert lore.waits_for() == ChatSoFar(0, 3)
    assert lore.entries_for(["the letter"], 128_000, chat=ChatSoFar(40, 2)) == []
    assert [e.content for e in lore.entries_for(["the letter"], 128_000, chat=ChatSoFar(6, 3))] == \
        ["The letter was hers all along."]


def test_a_sticky_entry_earlier_replies_hold_in_is_called_up_whatever_is_said_first_within_budget_and_group():
    """SillyTavern's `sticky`: not rolled again, the one its inclusion group keeps, first in the budget."""
    lore = book(entry("Curse", ["curse"], "The curse lore is long enough.", extensions={"sticky": 4, "probability": 0},
                      group="omens", priority=1),
                entry("Raven", ["raven"], group="omens", extensions={"group_override": True}),
                entry("Lamp", ["lamp"], priority=50), token_budget=7)
    curse = next(e.uid for e in lore.entries if e.name == "Curse")
    assert lore.remembers() == 4
    assert fired(lore, "a raven at the lamp") == ["Lamp", "Raven"]  # 4 of the 7 tokens
    held = ChatSoFar(10, 3, sticky=frozenset({curse}))
    assert [e.name for e in lore.entries_for(["a raven at the lamp"], 128_000, chat=held)] == ["Curse"]


def test_an_entry_cooling_down_is_not_called_up_by_its_keys():
    """SillyTavern's `cooldown`: out for that many messages, unless it is sticky still."""
    lore = book(entry("Curse", ["curse"], extensions={"cooldown": 3}), entry("Lamp", ["lamp"]))
    curse = lore.entries[0].uid
    cooling = ChatSoFar(10, 3, cooling=frozenset({curse}))
    assert [e.name for e in lore.entries_for(["the curse, the lamp"], 128_000, chat=cooling)] == ["Lamp"]
    both = ChatSoFar(10, 3, sticky=frozenset({curse}), cooling=frozenset({curse}))
    assert [e.name for e in lore.entries_for(["the lamp"], 128_000, chat=both)] == ["Curse", "Lamp"]


def test_the_scan_depth_decorator_and_a_fallback_for_one_not_followed():
    lore = book(entry("Deep", ["eldoria"], "@@scan_depth 3\nDeep lore."),
                entry("Fallback", ["eldoria"], "@@risu_only 4\n@@@scan_depth 3\nFallback lore."),
                entry("Book's", ["eldoria"]), scan_depth=1)
    assert fired(lore, "new message", "one before", "two before: Eldoria") == ["Deep", "Fallback"]


def test_char_in_a_key_is_the_characters_name_and_user_the_name_of_the_person_speaking():
    lore = book(entry("Her", ["{{char}}"]), entry("Boat", ["{{ User }}'s boat"]), entry("Sails", ["/{{user}} sails/i"]),
                entry("Name", ["{{user}}"]), char="Mira")
    assert fired(lore, "Mira, are you there?", user="Ann") == ["Her"]
    assert fired(lore, "Ann's boat leaks", user="Ann") == ["Boat", "Name"]
    assert fired(lore, "Ann's boat leaks", user="Bob") == []
    assert fired(lore, "today ANN SAILS", user="Ann") == ["Sails", "Name"]
    assert fired(lore, "a(b sails", user="a(b") == ["Sails", "Name"]  # a name is plain text, even in a /pattern/
    doctor = book(entry("Dr", ["/{{char}} at sea/"]), char="Dr. X")
    assert (fired(doctor, "DrZ X at sea"), fired(doctor, "Dr. X at sea")) == ([], ["Dr"])
    assert fired(lore, "anything at all", user="") == []  # with no name a key naming the person is nothing


def test_a_matched_entry_fires_as_often_as_its_probability_says():
    lore = book(entry("Omen", ["moon"], extensions={"probability": 30, "useProbability": True}),
                entry("Tide", ["moon"], extensions={"probability": 0, "useProbability": False}))
    assert fired(replace(lore, roll=lambda: 0.29), "the moon") == ["Omen", "Tide"]
    assert fired(replace(lore, roll=lambda: 0.31), "the moon") == ["Tide"]  # useProbability off: always
    assert 450 <= sum(fired(lore, "the moon") == ["Omen", "Tide"] for _ in range(2_000)) <= 750  # 30 % of 2,000


def test_an_entry_that_failed_its_roll_is_not_rolled_again_when_another_entrys_text_names_it():
    lore = book(entry("Omen", ["moon"], "An omen.", probability=50),
                entry("Storm", ["storm"], "Storms come with the full moon."))
    rolls = iter([0.9, 0.1])  # Omen fails its roll on the chat; a second roll would pass
    assert fired(replace(lore, roll=lambda: next(rolls)), "the moon and a storm") == ["Storm"]


def test_additional_and_exclude_keys_decorators_also_decide_whether_an_entry_fires():
    lore = book(entry("Harbour", ["harbour"], "@@additional_keys boat, ship\n@@exclude_keys storm\n"
                                              "@@additional_keys ferry\nThe harbour is calm."))
    assert [e.content for e in lore.entries] == ["The harbour is calm."]
    assert fired(lore, "the harbour") == []  # none of the additional keys
    assert fired(lore, "the harbour and a ship") == ["Harbour"]
    assert fired(lore, "the harbour and the ferry") == ["Harbour"]  # the decorator written twice
    assert fired(lore, "the harbour, a ship, a storm") == []  # an excluded key


@pytest.mark.parametrize("placed, depth", [
    ({"extensions": {"position": 4, "depth": 2}}, 2),  # SillyTavern's "at depth", its own depth
    ({"extensions": {"position": 4}}, 4),  # at depth, SillyTavern's default
    ({"extensions": {"position": 2}}, 4),  # at the top of the author's note, which goes 4 back by default
    ({"extensions": {"position": 3}}, 4),  # at its bottom
    ({"position": "before_char", "extensions": {"position": 0, "depth": 2}}, None),  # with the character
    ({"position": "after_char"}, None),
    ({"content": "@@depth 0\nThe tide is out."}, 0),  # Character Card V3
    ({"content": "@@depth deep\nThe tide is out.", "extensions": {"position": 4, "depth": 1}}, 1),
])
def test_an_entry_placed_among_the_messages_is_read_with_how_far_back_it_goes(placed, depth):
    lore = book(entry("Tide", ["tide"], **({"content": "The tide is out."} | placed)))
    assert [(e.content, e.depth) for e in lore.entries] == [("The tide is out.", depth)]


@pytest.mark.parametrize("written, role", [
    ({"extensions": {"position": 4, "depth": 1, "role": 1}}, "user"),  # SillyTavern numbers them
    ({"extensions": {"position": 4, "depth": 1, "role": 2}}, "assistant"),
    ({"extensions": {"position": 4, "depth": 1, "role": None}}, "system"),  # its default
    ({"content": "@@depth 1\n@@role assistant\nThe tide is out."}, "assistant"),  # Character Card V3
    ({"content": "@@depth 1\n@@role narrator\nThe tide is out."}, "system"),  # no such role
])
def test_an_entrys_role_is_read_as_sillytavern_and_the_v3_spec_write_it(written, role):
    lore = book(entry("Tide", ["tide"], **({"content": "The tide is out."} | written)))
    assert [(e.content, e.role) for e in lore.entries] == [("The tide is out.", role)]


def test_of_entries_called_up_together_in_an_inclusion_group_one_is_kept_drawn_by_their_weights():
    lore = book(entry("Red", ["cloak"], extensions={"group": "outfit", "group_weight": 25}),
                entry("Blue", ["cloak"], extensions={"group": "colours, outfit", "group_weight": 75}),
                entry("Hood", ["cloak"]))
    assert fired(replace(lore, roll=lambda: 0.2), "her cloak") == ["Red", "Hood"]  # 20 of 100: Red's 25
    assert fired(replace(lore, roll=lambda: 0.3), "her cloak") == ["Blue", "Hood"]
    assert 400 <= sum(fired(lore, "her cloak") == ["Red", "Hood"] for _ in range(2_000)) <= 600  # 25 % of 2,000
    assert fired(lore, "a red sail") == []


def test_an_entry_that_overrides_its_group_wins_it_and_of_several_the_highest_insertion_order():
    lore = book(entry("Red", ["cloak"], group="outfit", insertion_order=10, extensions={"group_override": True}),
                entry("Blue", ["cloak"], group="outfit", insertion_order=50, extensions={"groupOverride": True}),
                entry("Green", ["cloak"], group="outfit", insertion_order=90))
    assert {tuple(fired(lore, "her cloak")) for _ in range(50)} == {("Blue",)}


def test_group_scoring_leaves_out_the_entries_of_the_group_fewer_of_whose_keys_are_there():
    scored = {"use_group_scoring": True}
    lore = book(entry("Cloak", ["cloak"], group="outfit", extensions=scored),
                entry("Red cloak", ["cloak", "red"], group="outfit", extensions=scored),
                entry("Any cloak", ["cloak"], group="outfit", extensions={"group_weight": 0}))
    first_drawn = replace(lore, roll=lambda: 0.0)  # a draw would take the first
    assert fired(first_drawn, "her red cloak") == ["Red cloak"]  # Any cloak, not scored, weighs nothing
    assert fired(first_drawn, "her cloak") == ["Cloak"]  # a tie: both stay for the draw


def test_an_inclusion_group_called_up_already_keeps_out_the_others_another_entrys_text_names():
    lore = book(entry("Storm", ["storm"], "The bell rings in a storm.", group="warning"),
                entry("Bell", ["bell"], "The bell is bronze.", group="warning"),
                entry("Lamp", ["bell"], "The lamp burns beside the bell."))
    assert fired(lore, "a storm tonight") == ["Storm", "Lamp"]


def test_an_entry_its_group_left_out_may_be_called_up_later_in_the_scan_when_the_one_kept_failed_its_roll():
    lore = book(entry("Omen", ["moon"], "An omen.", group="sky", probability=50),
                entry("Stars", ["moon"], "Stars.", group="sky", extensions={"group_weight": 0}),
                entry("Tide", ["moon"], "The tide."))
    rolls = iter([0.5, 0.9])  # the draw keeps Omen, which fails its roll; the scan goes on with the tide's text
    assert fired(replace(lore, roll=lambda: next(rolls)), "the moon") == ["Tide", "Stars"]


def test_a_hidden_key_in_an_entrys_text_is_read_by_the_scan_and_never_reaches_the_prompt():
    lore = book(entry("Bell", ["bell"], "The bell is bronze.{{hidden_key: lighthouse}}"),
                entry("Lighthouse", ["lighthouse"], "The lighthouse is white."))
    assert fired(lore, "ring the bell") == ["Bell", "Lighthouse"]  # the V3 spec's hidden key
    assert filled(lore.entries[0].content, "Mira", "Ann") == "The bell is bronze."  # as it goes in


def test_an_older_cards_user_and_bot_in_a_key_are_the_names_too():
    lore = book(entry("Boat", ["<USER>'s boat"]), entry("Keeper", ["<BOT>'s keys"]), char="Mira")
    assert fired(lore, "Ann's boat and Mira's keys", user="Ann") == ["Boat", "Keeper"]


def test_the_text_of_an_entry_called_up_is_scanned_with_the_names_in_it():
    lore = book(entry("Bell", ["storm"], "{{char}} rings the bell for {{user}}."), entry("Keeper", ["Mira"]),
                entry("Guest", ["Ann"]), char="Mira")
    assert fired(lore, "a storm", user="Ann") == ["Bell", "Keeper", "Guest"]


def test_a_broken_regex_key_is_skipped_with_a_warning_and_the_card_still_loads(tmp_path, caplog):
    path = tmp_path / "nox.json"
    path.write_text(json.dumps({"spec": "chara_card_v2", "data": {"name": "Nox", "character_book": {"entries": [
        entry("Broken", ["/(/", "reactor"]), entry("Fine", ["lamp"])]}}}))
    with caplog.at_level("WARNING", logger="bot.characters.lorebook"):
        lore = load_character(CharacterConfig(name="Nox", card=path)).lorebook.counted(len)
    assert fired(lore, "the reactor and the lamp") == ["Broken", "Fine"]
    assert [r.getMessage() for r in caplog.records] == [
        f"lorebook of {path}: entry 'Broken' key '/(/' is not a valid regular expression "
        "(missing ) at position 1); it is skipped"]


def test_a_catastrophic_key_is_given_up_after_its_time_limit_and_skipped_with_one_warning(caplog):
    import time

    lore = book(entry("Trap", ["/(a|aa)+$/"]), entry("Lamp", ["lamp"]))
    message = "lamp " + "a" * 40 + "!"  # (a|aa)+$ would backtrack for hours on this
    with caplog.at_level("WARNING", logger="bot.characters.lorebook"):
        started = time.monotonic()
        assert fired(lore, message) == ["Lamp"]
        assert time.monotonic() - started < 1.0
        started = time.monotonic()
        assert fired(lore, message) == ["Lamp"]  # skipped from now on: no time spent on it again
        assert time.monotonic() - started < 0.05
    assert len(caplog.records) == 1
    assert "entry 'Trap' key '/(a|aa)+$/' took over 0.1 s to match and is skipped" in caplog.records[0].getMessage()


def test_a_turns_lorebook_matching_stops_after_its_budget_of_1_second(caplog):
    import time

    traps = [entry(f"Trap {n}", [f"/(a|aa)+{n}$/"]) for n in range(30)]  # 30 × 0.1 s if nothing stopped it
    lore = book(*traps, entry("Lamp", ["lamp"]))
    with caplog.at_level("WARNING", logger="bot.characters.lorebook"):
        started = time.monotonic()
        assert fired(lore, "lamp " + "a" * 40 + "!") == []
        assert time.monotonic() - started < 1.5
    assert "matching stopped after 1.0 s" in caplog.records[-1].getMessage()


def test_a_large_plain_lorebook_against_a_40_kb_message_takes_well_under_a_second():
    import random
    import time

    words = [f"word{n}" for n in range(5_000)]
    lore = book(*(entry(f"E{n}", random.Random(n).sample(words, 3)) for n in range(1_000)))
    message = " ".join(random.Random(0).choices(words, k=4_000))[:40_000]
    started = time.monotonic()
    assert fired(lore, message)
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("character_book, message", [
    ({"entries": {"a": 1}}, "'character_book.entries' should be a list"),
    ({"entries": [{"keys": "x", "content": 5}]}, "'character_book.entries[0].content' should be text"),
    ({"entries": [{"keys": [1], "content": "x"}]}, "'character_book.entries[0].keys' should be a list of texts"),
])
def test_a_malformed_lorebook_is_one_clear_start_up_line_naming_the_card(tmp_path, character_book, message):
    path = tmp_path / "nox.json"
    path.write_text(json.dumps({"spec": "chara_card_v2", "data": {"name": "Nox", "character_book": character_book}}))
    with pytest.raises(ConfigError) as error:
        load_character(CharacterConfig(name="Nox", card=path))
    assert str(path) in str(error.value) and message in str(error.value)


LORE_CARD = {
    "spec": "chara_card_v3", "spec_version": "3.0",
    "data": {
        "name": "Mira", "description": "{{char}} keeps the lighthouse.", "first_mes": "Hello.",
        "character_book": {"entries": [
            entry("Eldoria", ["Eldoria"], "Eldoria is the drowned city {{char}} grew up in; {{user}} has never seen it."),
            entry("Lamp", ["lamp"], "The lamp is lit with whale oil."),
            entry("Boat", ["{{user}}'s boat"], "{{user}}'s boat is moored below the lighthouse."),
            entry("Keeper", ["{{char}}'s keys"], "The keeper's keys open every door but one."),
            entry("Fog", ["fog"], "@@depth 1\nIn fog {{char}} rings the bell every minute."),
            entry("Gull", ["fog"], "@@depth 1\n@@role assistant\n*A gull cries somewhere in the fog.*"),
            entry("Storm", ["fog"], "A storm always follows the fog.", extensions={"position": 4, "depth": 0}),
        ]},
    },
}


@pytest.fixture
async def lore_runtime(llm, tmp_path, clock):
    card = tmp_path / "mira.json"
    card.write_text(json.dumps(LORE_CARD))
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    raw["characters"][0] = {"name": "Mira", "card": str(card)}
    runtime = await build_runtime(parse_config(raw, tmp_path), clock=clock)
    yield runtime
    await runtime.close()


async def test_a_fired_entry_goes_in_after_the_character_as_the_card_authors_text(lore_runtime, llm):
    ann = Chat(lore_runtime)
    await ann.say("What was Eldoria like?")
    messages = llm.requests[-1]["messages"]
    lore = messages[1]
    assert lore["role"] == "system" and lore["content"].startswith("World info from Mira's card")
    assert "Eldoria is the drowned city Mira grew up in; Ann has never seen it." in lore["content"]
    assert "whale oil" not in llm.prompt_text()


async def test_a_key_naming_the_character_or_the_person_speaking_fires_on_their_names(lore_runtime, llm):
    ann = Chat(lore_runtime)
    await ann.say("Where is Ann's boat? And where are Mira's keys?")
    assert "Ann's boat is moored below the lighthouse." in llm.prompt_text()
    assert "The keeper's keys open every door but one." in llm.prompt_text()
    bob = Chat(lore_runtime, user="bob", name="Bob", chat_id="dm-bob")
    await bob.say("Where is Ann's boat?")
    assert "moored below the lighthouse" not in llm.prompt_text()


async def test_an_entry_placed_at_a_depth_goes_before_that_many_of_the_newest_messages_as_whose_words_its_role_says(
        lore_runtime, llm):
    ann = Chat(lore_runtime)
    llm.add(text("The lamp is lit."), text("Thick fog tonight."))
    for said in ("Evening, Mira.", "Is the fog coming in?"):
        await ann.say(said)
    messages = llm.requests[-1]["messages"]
    said = [m["content"] for m in messages]
    bell = said.index("In fog Mira rings the bell every minute.")
    assert messages[bell]["role"] == "system"
    # at one depth, as SillyTavern orders them: the assistant's, then the system's nearest the newest
    assert messages[bell - 1] == {"role": "assistant", "content": "*A gull cries somewhere in the fog.*"}
    assert [m["content"] for m in messages[bell + 1:] if m["role"] != "system"] == ["Is the fog coming in?"]
    assert said[-1] == "A storm always follows the fog." and messages[-1]["role"] == "system"  # depth 0: after them all
    assert not any("In fog" in m["content"] or "storm" in m["content"] for m in messages[:bell]
                   if m["content"].startswith("World info"))


async def test_a_turn_counts_the_chat_for_the_entries_that_wait_even_past_its_live_window(llm, tmp_path, clock):
    card = tmp_path / "mira.json"
    card.write_text(json.dumps({"spec": "chara_card_v3", "spec_version": "3.0", "data": {
        "name": "Mira", "description": "{{char}} keeps the lighthouse.", "first_mes": "Hello.",
        "character_book": {"entries": [
            entry("Wreck", ["wreck"], "The wreck holds the keeper's log.", extensions={"delay": 5}),
            entry("Letter", ["letter"], "@@activate_only_after 2\nThe letter was Mira's all along."),
            entry("Bell", ["bell"], "The bell was cast in 1871.", extensions={"delay": 61}),
        ]}}}))
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    raw["characters"][0] = {"name": "Mira", "card": str(card)}
    async with await build_runtime(parse_config(raw, tmp_path), clock=clock) as runtime:
        ann = Chat(runtime)
        for said in ("the wreck, the letter", "the wreck, the letter again"):  # 1 message, then 3 and 1 reply
            await ann.say(said)
            assert "keeper's log" not in llm.prompt_text() and "Mira's all along" not in llm.prompt_text()
        await ann.say("and the wreck, the letter?")  # 5 messages, 2 of them Mira's
        assert "keeper's log" in llm.prompt_text() and "Mira's all along" in llm.prompt_text()
        conversation = await runtime.cast.conversation_for(ann.key)
        for n in range(52):  # longer than the live window reads (50 messages): counted back in the store
            await runtime.store.conversations.add_user_message(conversation.id, await ann.person_id(), "Ann",
                                                               f"line {n}", 2, f"line-{n}")
        await ann.say("ring the bell")  # 59 messages, the one answered too
        assert "cast in 1871" not in llm.prompt_text()
        await ann.say("ring the bell again")  # 61
        assert "cast in 1871" in llm.prompt_text()


async def test_a_sticky_entry_stays_in_and_one_cooling_down_stays_out_for_as_many_messages_and_regenerate_adds_none(
        llm, tmp_path, clock):
    """SillyTavern's `sticky` and `cooldown`, counted in the chat's messages since the reply that
    called the entry up (the one answered with them); a regenerated reply counts as the reply it
    replaces did, from the replies before it."""
    card = tmp_path / "mira.json"
    card.write_text(json.dumps({"spec": "chara_card_v3", "spec_version": "3.0", "data": {
        "name": "Mira", "description": "{{char}} keeps the lighthouse.", "first_mes": "Hello.",
        "character_book": {"entries": [
            entry("Curse", ["curse"], "The curse binds the lighthouse.", extensions={"sticky": 3}),
            entry("Raven", ["raven"], "A raven means a death at sea.", extensions={"cooldown": 4}),
            entry("Bell", ["bell"], "The bell was cast in 1871.", extensions={"cooldown": 4}),
        ]}}}))
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    raw["characters"][0] = {"name": "Mira", "card": str(card)}
    async with await build_runtime(parse_config(raw, tmp_path), clock=clock) as runtime:
        ann = Chat(runtime)

        def called_up() -> tuple[bool, bool, bool]:
            return tuple(words in llm.prompt_text() for words in ("curse binds", "death at sea", "cast in 1871"))

        await ann.say("tell me of the curse and the raven")
        assert called_up() == (True, True, False)
        second = await ann.say("and the raven? the bell?")  # 2 messages since: the curse sticks, the raven cools
        assert called_up() == (True, False, True)
        await ann.regenerate(second.turn)  # the same again: the bell is not cooling down from the reply replaced
        assert called_up() == (True, False, True)
        await ann.say("the raven again? the bell?")  # 4 since the first: the curse is done, the raven may come
        assert called_up() == (False, True, False)
        await ann.say("and the curse?")  # afresh; the raven cools from the reply before, the bell is done cooling
        assert called_up() == (True, False, True)  # (the bell and the raven said in the 4 messages scanned)


async def test_memory_why_names_the_entries_that_fired(lore_runtime, llm):
    ann = Chat(lore_runtime)
    await ann.say("Is the lamp still lit?")
    why = await ann.memory("/memory why")
    assert "• Lorebook entries: 1 (Lamp (" in why.text


async def test_a_catastrophic_key_never_holds_up_another_persons_reply(llm, tmp_path, clock, monkeypatch):
    """Matching runs off the event loop: while Ann's turn spends its whole lorebook budget on
    30 catastrophic keys, Bob's turn in another chat is answered, and the loop never stalls."""
    import asyncio
    import threading
    import time

    from bot.characters.lorebook import Lorebook

    matching = threading.Event()  # set where matching begins (the real matching runs on)
    entries_for = Lorebook.entries_for
    monkeypatch.setattr(Lorebook, "entries_for", lambda book, *args: matching.set() or entries_for(book, *args))

    card = tmp_path / "trap.json"
    card.write_text(json.dumps({"spec": "chara_card_v2", "data": {"name": "Mira", "character_book": {
        "entries": [entry(f"Trap {n}", [f"/(a|aa)+{n}$/"]) for n in range(30)]}}}))
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    raw["characters"][0] = {"name": "Mira", "card": str(card)}
    runtime = await build_runtime(parse_config(raw, tmp_path), clock=clock)
    try:
        llm.default = "ok"
        stalls, ticking = [], True

        async def tick():
            while ticking:
                before = time.monotonic()
                await asyncio.sleep(0.01)
                stalls.append(time.monotonic() - before)

        ticker = asyncio.create_task(tick())
        ann_turn = asyncio.create_task(Chat(runtime).say("a" * 40 + "!"))
        assert await asyncio.to_thread(matching.wait, 5)  # Ann's turn is matching keys
        started = time.monotonic()
        await Chat(runtime, user="bob", name="Bob", chat_id="dm-bob").say("hello")
        bob_waited = time.monotonic() - started
        await ann_turn
        ticking = False
        await ticker
        assert bob_waited < 0.5
        assert max(stalls) < 0.3
    finally:
        await runtime.close()
