"""SPEC section 13 — who may talk: `[access] allow` / `deny`, and a character's own lists.
(Through the real process and both platforms: tests/test_platforms_end_to_end.py.)"""

import pytest

from bot.access.rules import AccessRules
from bot.config import ConfigError, parse_config
from bot.contract import Asker
from tests.conftest import config_dict

ANN = Asker("telegram", "1001", ("1001",))
ANN_IN_GROUP = Asker("telegram", "1001", ("-100",))
ROY = Asker("discord", "123", ("789",), roles=("456",))
ROY_IN_THREAD = Asker("discord", "123", ("555", "789"), roles=("456",))
ANONYMOUS_ADMIN = Asker("telegram", None, ("-100",))


def rules(allow=(), deny=()) -> AccessRules:
    return AccessRules(frozenset(allow), frozenset(deny))


def test_an_empty_allow_list_lets_everyone_in():
    assert rules().lets_in(ANN) and rules().lets_in(ROY) and rules().lets_in(ANONYMOUS_ADMIN)


def test_a_non_empty_allow_list_lets_in_only_whom_it_names():
    allow = rules(allow=["telegram:1001"])
    assert allow.lets_in(ANN)
    assert not allow.lets_in(Asker("telegram", "1002", ("1002",)))
    assert not allow.lets_in(Asker("discord", "1001", ("1001",)))  # the same number on another platform


def test_deny_wins_over_allow():
    assert not rules(allow=["telegram-chat:-100"], deny=["telegram:1001"]).lets_in(ANN_IN_GROUP)


@pytest.mark.parametrize("rule, asker", [
    ("discord-role:456", ROY),
    ("discord-channel:789", ROY),
    ("discord-channel:789", ROY_IN_THREAD),  # a thread counts as its parent channel too
    ("telegram-chat:-100", ANN_IN_GROUP),
    ("telegram-chat:-100", ANONYMOUS_ADMIN),  # a chat writing is judged by the chat
])
def test_roles_channels_and_chats_are_rules_too(rule, asker):
    assert rules(allow=[rule]).lets_in(asker)
    assert not rules(deny=[rule]).lets_in(asker)


def test_nobody_in_particular_is_not_let_in_by_an_allow_list_of_people():
    assert not rules(allow=["telegram:1001"]).lets_in(ANONYMOUS_ADMIN)


def test_the_global_lists_and_the_characters_own_lists_must_both_let_someone_in(tmp_path):
    raw = config_dict("http://x/v1", tmp_path / "db")
    raw["access"] = {"allow": ["telegram:1001", "telegram:1002"]}
    raw["characters"][0]["access"] = {"deny": ["telegram:1002"]}
    config = parse_config(raw, tmp_path)
    both = lambda asker: config.access.lets_in(asker) and config.characters[0].access.lets_in(asker)
    assert both(ANN)
    assert not both(Asker("telegram", "1002", ("1002",)))  # the character's deny
    assert not both(Asker("telegram", "1003", ("1003",)))  # not in the global allow


@pytest.mark.parametrize("access, message", [
    ({"allow": "telegram:1"}, "access.allow: expected a list like"),
    ({"deny": ["whatsapp:1"]}, "access.deny: 'whatsapp' is not one of discord, telegram, discord-role, discord-channel, "
                               "telegram-chat"),
    ({"deny": ["telegram:ann"]}, "access.deny: 'telegram:ann': the part after telegram: should be a numeric id"),
    ({"deny": [1001]}, "access.deny: expected entries like"),
    ({"alow": []}, "access.alow: unknown key"),
])
def test_a_bad_access_rule_stops_start_up_naming_it(tmp_path, access, message):
    raw = config_dict("http://x/v1", tmp_path / "db") | {"access": access}
    with pytest.raises(ConfigError) as error:
        parse_config(raw, tmp_path)
    assert str(error.value).startswith(message)
