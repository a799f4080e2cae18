"""SPEC section 10 — config.toml, secrets from environment variables, clear start-up errors."""

import os
import re
import subprocess
import sys

import pytest

from adapters.settings import TelegramSettings
from bot.cli import platform_settings
from bot.config import ConfigError, load_config, parse_config
from tests.conftest import API_KEY_ENV, ROOT, config_dict


def checked_config(raw, base):
    """The config as `python -m bot` reads it: the core's keys, then each platform's."""
    config = parse_config(raw, base)
    platform_settings(config)
    return config


def test_the_example_config_loads(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv("MIRA_TELEGRAM_TOKEN", "123:secret")
    config = load_config(ROOT / "config.example.toml")
    assert config.llm.model == "gpt-4o-mini"
    assert config.llm.context_window == 128_000
    assert config.llm.tools == "auto"
    telegram, = [settings for *_, settings in platform_settings(config) if isinstance(settings, TelegramSettings)]
    assert telegram.base_url == "https://api.telegram.org/bot"
    assert config.characters[0].name == "Mira"
    assert config.characters[0].card == ROOT / "characters" / "mira.json"
    assert config.storage.url == "sqlite:///data/keepsake.sqlite3" and config.storage.base == ROOT


def test_secrets_come_from_the_environment_never_the_file(monkeypatch, tmp_path):
    monkeypatch.setenv("MIRA_TG", "123:secret")
    raw = config_dict("http://x/v1", tmp_path / "db")
    raw["characters"][0]["telegram_token_env"] = "MIRA_TG"
    config = parse_config(raw, tmp_path)
    assert config.llm.api_key == "sk-test-not-a-real-key"
    (platform, name, telegram), = platform_settings(config)  # no Discord token is set: no Discord adapter
    assert (platform.name, name, telegram.token) == ("telegram", "Mira", "123:secret")
    assert "sk-test" not in repr(config) and "123:secret" not in repr(config)


def test_characters_without_a_discord_bot_of_their_own_are_voiced_by_the_one_host_bot(monkeypatch, tmp_path):
    """SPEC 15: with [discord] host_token_env, one adapter (one bot login) voices every character
    lacking discord_token_env; a character with its own bot keeps it."""
    from bot.cli import platform_adapters

    monkeypatch.setenv("HOST_TOKEN", "host-secret")
    monkeypatch.setenv("TAM_TOKEN", "tam-secret")
    raw = config_dict("http://x/v1", tmp_path / "db")
    raw["discord"] = {"host_token_env": "HOST_TOKEN"}
    raw["characters"] += [{"name": "Aki", "persona": "Aki.", "discord_always_on_channels": [42]},
                          {"name": "Tam", "persona": "Tam.", "discord_token_env": "TAM_TOKEN"}]
    config = parse_config(raw, tmp_path)
    assert [name for name, _ in platform_adapters(config)] == ["discord:Tam", "discord:Mira+Aki"]
    hosted = [s for _, name, s in platform_settings(config) if name in ("Mira", "Aki")]
    assert all(s.hosted and s.token == "host-secret" and s.token_env == "HOST_TOKEN" for s in hosted)
    monkeypatch.delenv("HOST_TOKEN")  # the host's token unset: only Tam runs on Discord
    assert [name for name, _ in platform_adapters(config)] == ["discord:Tam"]


def test_check_ins_on_a_host_bots_second_character_are_a_config_error_naming_the_key(monkeypatch, tmp_path):
    """SPEC 14: a host bot's DMs are with its first character; another one it voices cannot write first."""
    from bot.cli import platform_adapters

    monkeypatch.setenv("HOST_TOKEN", "host-secret")
    monkeypatch.setenv("AKI_TG", "456:aki-secret")
    raw = config_dict("http://x/v1", tmp_path / "db")
    raw["discord"] = {"host_token_env": "HOST_TOKEN"}
    raw["characters"][0]["checkins"] = {"after_hours": 48}  # Mira: the host's first, with DMs
    raw["characters"] += [{"name": "Aki", "persona": "Aki.", "checkins": {"after_hours": 48}}]
    with pytest.raises(ConfigError, match=r"^characters\[1\]\.checkins: Aki is voiced by a bot whose DMs are "
                                          r"Mira's \(the first character it voices\)"):
        platform_adapters(parse_config(raw, tmp_path))
    raw["characters"][1]["telegram_token_env"] = "AKI_TG"  # a bot of Aki's own: it writes first on Telegram
    assert [name for name, _ in platform_adapters(parse_config(raw, tmp_path))] == ["discord:Mira+Aki", "telegram:Aki"]


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c["llm"].update(tools="maybe"), "llm.tools: expected one of auto | on | off"),
    (lambda c: c["llm"].update(context_window="big"), "llm.context_window: expected a whole number"),
    (lambda c: c["llm"].update(temprature=0.3), "llm.temprature: unknown key"),
    (lambda c: c["characters"][0].pop("persona"), "characters[0].card: give either"),
    (lambda c: c.pop("characters"), "characters: expected at least one"),
    (lambda c: c.update(character=c.pop("characters")), "character: there is no [[character]] table: write "
                                                         "[[characters]], with an s"),
    (lambda c: c["characters"][0].update(discord_always_on_channels="123"),
     "characters[0].discord_always_on_channels: expected a list"),
    (lambda c: c["llm"].update(base_url="localhost:11434/v1"),
     "llm.base_url: expected an address starting with http:// or https://"),
    (lambda c: c.update(telegram={"base_url": "api.telegram.org/bot"}),
     "telegram.base_url: expected an address starting with http:// or https://"),
])
def test_a_bad_key_stops_start_up_naming_the_key(tmp_path, mutate, message):
    raw = config_dict("http://x/v1", tmp_path / "db")
    mutate(raw)
    with pytest.raises(ConfigError, match=message.replace("|", r"\|").replace("[", r"\[").replace("]", r"\]")):
        checked_config(raw, tmp_path)


def test_a_missing_api_key_variable_is_named(monkeypatch, tmp_path):
    monkeypatch.delenv(API_KEY_ENV)
    with pytest.raises(ConfigError, match=f"llm.api_key_env: environment variable {API_KEY_ENV} is not set"):
        parse_config(config_dict("http://x/v1", tmp_path / "db"), tmp_path)


def test_start_up_prints_one_line_for_a_bad_config(tmp_path):
    bad = tmp_path / "config.toml"
    bad.write_text('[llm]\ntools = "maybe"\n')
    result = subprocess.run([sys.executable, "-m", "bot", "--config", str(bad)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "x"})
    assert result.returncode == 2
    assert result.stderr.strip() == "config error: llm.tools: expected one of auto | on | off, got 'maybe'"


def test_characters_list_and_remove_need_no_api_key(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[llm]\napi_key_env = "UNSET_KEY_VARIABLE"\n\n[storage]\npath = "k.sqlite3"\n\n'
                      '[[characters]]\nname = "Mira"\npersona = "You are Mira."\n')
    env = {"PATH": "/usr/bin:/bin"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bot", "characters", *args, "--config", str(config)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)

    listed = run("list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == "Mira: in the config; 0 character memories"
    removed = run("remove", "Nobody")
    assert removed.returncode == 1 and "There is no character named 'Nobody'" in removed.stdout
    assert "api_key" not in removed.stderr


SPEC_SECTION_10 = """
[llm]
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"
model = "gpt-4o-mini"
context_window = 128000
max_reply_tokens = 800
temperature = 0.8
tools = "auto"            # auto | on | off
timeout_s = 60
max_retries = 3
# summary_model = "gpt-4o-mini"

[storage]
url = "sqlite:///data/keepsake.sqlite3"     # or "postgresql://user@host:5432/keepsake"
                                            # (`path = "data/keepsake.sqlite3"` still works)
# password_env = "KEEPSAKE_DB_PASSWORD"     # the PostgreSQL password, never in the file

[recall]                                    # section 11
enabled = true
budget_tokens = 1500
# embedding_model = "text-embedding-3-small"   # optional: semantic recall through [llm] base_url

[telegram]
base_url = "https://api.telegram.org/bot"   # a local Bot API server or a test fake goes here
mode = "polling"                            # or "webhook" (section 12)
# webhook_url = "https://bot.example.com/telegram"   # the public address Telegram calls
# listen = "0.0.0.0"
# port = 8443
# secret_token_env = "KEEPSAKE_WEBHOOK_SECRET"

[discord]
# shard_count = 4                           # section 12; default: discord.py decides
# shard_ids = [0, 1]                        # the shards this process runs
# host_token_env = "KEEPSAKE_DISCORD_HOST"  # section 15: one bot voices characters by webhook

[scenes]                                    # section 15
max_chain = 3                               # character messages in a row without a person

[[characters]]
name = "Mira"
card = "characters/mira.json"               # Character Card V2 (.json or .png), or:
# persona = "You are Mira, ..."
discord_token_env = "MIRA_DISCORD_TOKEN"
telegram_token_env = "MIRA_TELEGRAM_TOKEN"
discord_always_on_channels = []             # channel ids where every message is answered
"""


def test_a_config_in_exactly_the_format_of_spec_section_10_loads(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    path = tmp_path / "config.toml"
    path.write_text(SPEC_SECTION_10)
    config = load_config(path)
    assert config.storage.url == "sqlite:///data/keepsake.sqlite3"
    assert config.recall.enabled and config.recall.budget_tokens == 1_500
    assert platform_settings(config) == []  # no token set: nothing runs, yet every platform key is checked


@pytest.mark.parametrize("section, message", [
    ({"telegram": {"mode": "webhook"}}, "telegram.webhook_url: mode = \"webhook\" needs"),
    ({"telegram": {"mode": "webhook", "webhook_url": "https://bot.example.com/tg"}},
     "telegram.secret_token_env: mode = \"webhook\" needs a secret token"),
    ({"telegram": {"mode": "pigeon"}}, "telegram.mode: expected one of polling | webhook"),
    ({"discord": {"shard_ids": [0]}}, "discord.shard_ids: give discord.shard_count too"),
    ({"discord": {"shard_count": 2, "shard_ids": [2]}}, "discord.shard_ids: expected ids from 0 to 1"),
    ({"recall": {"budget_tokens": 0}}, "recall.budget_tokens: expected a whole number ≥ 1"),
    ({"storage": {"url": "mysql://x/y"}}, "storage.url: 'mysql://x/y': expected a URL starting with"),
    ({"metrics": {"port": 70000}}, "metrics.port: expected a whole number ≤ 65535"),
    ({"metrics": {"prot": 9108}}, "metrics.prot: unknown key"),
    ({"limits": {"turns_per_minute": 0}}, "limits.turns_per_minute: expected a whole number ≥ 1"),
])
def test_section_12_and_11_settings_are_checked_naming_the_key(tmp_path, section, message):
    raw = config_dict("http://x/v1", tmp_path / "db") | section
    if "storage" in section:
        raw["storage"] = section["storage"]
    with pytest.raises(ConfigError, match=message.replace("|", r"\|").replace("(", r"\(").replace(")", r"\)")):
        checked_config(raw, tmp_path)


def test_a_postgresql_url_and_a_metrics_port_are_taken_as_given(tmp_path):
    raw = config_dict("http://x/v1", tmp_path / "db") | {"metrics": {"port": 9108}}
    raw["storage"] = {"url": "postgresql://keepsake@db.example.com:5432/keepsake?schema=bots"}
    config = parse_config(raw, tmp_path)
    assert config.storage.url == "postgresql://keepsake@db.example.com:5432/keepsake?schema=bots"
    assert (config.metrics.port, config.metrics.listen) == (9108, "127.0.0.1")


def _characters(config_text: str, tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    config = tmp_path / "config.toml"
    config.write_text(config_text)
    return subprocess.run([sys.executable, "-m", "bot", "characters", *args, "--config", str(config)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", **env})


PERSONA = '\n[[characters]]\nname = "Mira"\npersona = "You are Mira."\n'


async def test_a_database_url_is_printed_with_its_password_masked(tmp_path):
    from tests.postgres import fresh_schema_url

    schemas = fresh_schema_url()  # a schema of its own: the server's public schema is nobody's
    parts = (await anext(schemas)).split("://", 1)[1].split("@", 1)[-1]  # host:port/database?schema=…
    try:
        done = _characters(f'[storage]\nurl = "postgresql://postgres:hunter2@{parts}"\n{PERSONA}', tmp_path,
                           "remove", "Nobody")
    finally:
        await anext(schemas, None)
    assert done.returncode == 1, done.stderr
    assert f"There is no character named 'Nobody' in postgresql://postgres:***@{parts}." in done.stdout
    assert "hunter2" not in done.stdout + done.stderr


def test_a_mistyped_storage_url_is_one_line_with_its_password_masked(tmp_path):
    done = _characters('[storage]\nurl = "postgres-ql://keepsake:hunter2@db.example.com/keepsake"\n' + PERSONA,
                       tmp_path, "list")
    assert done.returncode == 2
    assert done.stderr.strip() == ("config error: storage.url: 'postgres-ql://keepsake:***@db.example.com/keepsake': "
                                   "expected a URL starting with sqlite:// or postgresql:// or postgres://")


def test_a_database_that_cannot_be_reached_is_one_line_naming_it_masked(tmp_path):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = _characters(f'[storage]\nurl = "postgresql://keepsake:hunter2@127.0.0.1:{port}/keepsake"\n{PERSONA}',
                       tmp_path, "list")
    assert done.returncode == 2
    line, = done.stderr.strip().splitlines()
    assert line.startswith(f"storage error: cannot open the database at postgresql://keepsake:***@127.0.0.1:{port}/keepsake: ")
    assert "hunter2" not in done.stderr


def test_an_sqlite_file_that_is_no_database_is_one_line_naming_it(tmp_path):
    """Not a traceback (and, before, not a process held open by the connections it had made)."""
    (tmp_path / "notes.txt").write_text("shopping: eggs, tea\n" * 200)
    done = _characters(f'[storage]\nurl = "sqlite:///notes.txt"\n{PERSONA}', tmp_path, "list")
    assert done.returncode == 2
    line, = done.stderr.strip().splitlines()
    assert line == "storage error: cannot open the database at sqlite:///notes.txt: file is not a database"


def test_a_postgresql_database_that_does_not_exist_is_one_line_for_the_bot_and_for_storage_copy(tmp_path):
    from urllib.parse import urlsplit, urlunsplit

    from tests.postgres import server_url

    parts = urlsplit(server_url())
    missing = urlunsplit(parts._replace(path="/keepsake_no_such_database"))
    done = _characters(f'[storage]\nurl = "{missing}"\n{PERSONA}', tmp_path, "list")
    assert done.returncode == 2
    line, = done.stderr.strip().splitlines()
    assert line.startswith("storage error: cannot open the database at ") and "keepsake_no_such_database" in line
    (tmp_path / "keepsake.sqlite3").touch()
    copied = subprocess.run([sys.executable, "-m", "bot", "storage", "copy", "--from", "sqlite:///keepsake.sqlite3",
                             "--to", missing], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert copied.returncode != 0 and "Traceback" not in copied.stderr
    assert len(copied.stderr.strip().splitlines()) == 1 and "keepsake_no_such_database" in copied.stderr


def test_the_postgresql_password_may_come_from_password_env_and_is_redacted(monkeypatch, tmp_path):
    from bot.logs import config_secrets
    from storage.factory import with_password

    raw = config_dict("http://x/v1", tmp_path / "db")
    raw["storage"] = {"url": "postgresql://keepsake@db.example.com:5432/keepsake", "password_env": "KEEPSAKE_DB_PASSWORD"}
    with pytest.raises(ConfigError, match="storage.password_env: environment variable KEEPSAKE_DB_PASSWORD is not set"):
        parse_config(raw, tmp_path)
    monkeypatch.setenv("KEEPSAKE_DB_PASSWORD", "p@ss:word/1")
    config = parse_config(raw, tmp_path)
    assert config.storage.password == "p@ss:word/1"
    assert "p@ss:word/1" in config_secrets(config)
    assert with_password(config.storage.url, config.storage.password) == \
        "postgresql://keepsake:p%40ss%3Aword%2F1@db.example.com:5432/keepsake"


async def test_a_password_from_password_env_opens_the_database(tmp_path):
    """On the test server (trust auth ignores the password; the URL it builds must still be valid)."""
    from bot.memory.saved_memories import CAPS
    from storage.factory import open_store
    from tests.postgres import fresh_schema_url

    schemas = fresh_schema_url()
    url = await anext(schemas)
    try:
        store = await open_store(url, CAPS, password="p@ss:word/1")
        await store.close()
    finally:
        await anext(schemas, None)


@pytest.mark.parametrize("checkins, message", [
    ({}, "characters[0].checkins.after_hours: missing"),
    ({"after_hours": 0}, "characters[0].checkins.after_hours: expected a number above 0"),
    ({"after_hours": 48, "quiet_hours": "22-9"}, 'characters[0].checkins.quiet_hours: expected a range like "22:00-09:00"'),
    ({"after_hours": 48, "timezone": "Europe/Atlantis"}, "characters[0].checkins.timezone: expected a time zone's IANA name"),
    ({"after_hours": 48, "scan_seconds": -1}, "characters[0].checkins.scan_seconds: expected a number above 0"),
    ({"after_hours": 48, "every": 5}, "characters[0].checkins.every: unknown key"),
    # #36: each names the key and shows the expected form
    ({"after_hours": 48, "quiet_hours": ["22:00", "09:00"]},
     'characters[0].checkins.quiet_hours: expected a range like "22:00-09:00" (one text)'),
    ({"after_hours": 48, "quiet_hours": 22}, 'characters[0].checkins.quiet_hours: expected a range like "22:00-09:00"'),
    ({"after_hours": 48, "quiet_hours": "09:00-09:00"},
     "characters[0].checkins.quiet_hours: '09:00-09:00' starts and ends at the same time, so it would never be quiet"),
    ({"after_minutes": 1}, "characters[0].checkins.after_minutes: unknown key"),
])
def test_section_14_checkins_are_checked_naming_the_key(tmp_path, checkins, message):
    raw = config_dict("http://x/v1", tmp_path / "db")
    raw["characters"][0]["checkins"] = checkins
    with pytest.raises(ConfigError, match=re.escape(message)):
        checked_config(raw, tmp_path)


def test_section_14_checkins_take_fractions_of_an_hour_and_default_to_utc(tmp_path):
    raw = config_dict("http://x/v1", tmp_path / "db")
    raw["characters"][0]["checkins"] = {"after_hours": 0.001, "quiet_hours": "22:00-09:00"}
    checkins = checked_config(raw, tmp_path).characters[0].checkins
    assert (checkins.after_hours, checkins.quiet_hours, checkins.timezone, checkins.scan_seconds) == \
        (0.001, (22 * 60, 9 * 60), "UTC", 300)


SPEC_SECTION_14 = """
[characters.checkins]
after_hours = 48               # a one-to-one conversation quiet this long gets one message
quiet_hours = "22:00-09:00"    # never sent inside this range ...
timezone = "Europe/Paris"      # ... read in this zone (IANA name; default UTC)
# scan_seconds = 300           # how often due conversations are looked for (default 300)
"""


def test_the_checkins_table_of_spec_section_14_loads_under_the_character(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    path = tmp_path / "config.toml"
    path.write_text(SPEC_SECTION_10 + SPEC_SECTION_14)
    checkins = load_config(path).characters[0].checkins
    assert (checkins.after_hours, checkins.quiet_hours, checkins.timezone) == (48, (1320, 540), "Europe/Paris")


@pytest.mark.parametrize("section, key", [
    (("characters", 0), "telegram_token_env"), (("characters", 0), "discord_token_env"),
    (("discord",), "host_token_env"), (("llm",), "api_key_env")])
def test_a_token_pasted_where_a_variable_name_belongs_is_refused_and_never_printed(tmp_path, section, key):
    """SPEC 10: a `*_env` key names an environment variable; a secret written in its place is
    refused with one line naming the key, and the line never repeats the secret."""
    from bot.cli import platform_settings

    pasted = "123456789:AAHsecretlooking-token_value"
    raw = config_dict("http://x/v1", tmp_path / "db")
    table = raw
    for part in section:
        table = table.setdefault(part, {}) if isinstance(part, str) else table[part]
    table[key] = pasted
    with pytest.raises(ConfigError) as refused:
        platform_settings(parse_config(raw, tmp_path))
    where = ".".join(part if isinstance(part, str) else f"[{part}]" for part in section).replace(".[", "[")
    assert str(refused.value).startswith(f"{where}.{key}: expected the name of an environment variable")
    assert pasted not in str(refused.value) and "123456789" not in str(refused.value)


@pytest.mark.parametrize("key", ["telegram_token_env", "discord_token_env"])
def test_two_characters_naming_one_bot_token_variable_is_one_line_naming_the_key(tmp_path, key):
    """#36: Telegram answers a second poller of one token with 409 Conflict; say it at start-up."""
    raw = config_dict("http://x/v1", tmp_path / "db")
    raw["characters"] = [{"name": "Mira", "persona": "x", key: "SHARED_TOKEN"},
                         {"name": "Aki", "persona": "y", key: "SHARED_TOKEN"}]
    with pytest.raises(ConfigError, match=re.escape(f"characters[1].{key}: SHARED_TOKEN is also characters[0]'s (Mira)")):
        platform_settings(parse_config(raw, tmp_path))


@pytest.mark.parametrize("section, message", [
    ({"limits": {"tokens_per_day": 0}},
     "limits.tokens_per_day: expected a whole number ≥ 1, got 0 (leave the key out for no limit)"),
    ({"character": [{"name": "Mira", "persona": "x"}]},
     "character: unknown table [[character]]; the characters are [[characters]] tables"),
])
def test_a_setup_mistake_is_named_with_what_to_do(tmp_path, monkeypatch, section, message):
    """#47: the one line names the key and what fixes it."""
    monkeypatch.setenv(API_KEY_ENV, "x")
    raw = config_dict("http://x/v1", tmp_path / "db") | section
    with pytest.raises(ConfigError) as raised:
        checked_config(raw, tmp_path)
    assert str(raised.value) == message


def test_a_card_of_broken_json_is_named_with_its_line_and_column(tmp_path):
    from bot.characters.cards import load_character
    from bot.config import CharacterConfig

    card = tmp_path / "mira.json"
    card.write_text('{\n  "name": "Mira",\n  "description": "keeps the lamp"\n  "personality": "kind"\n}')
    with pytest.raises(ConfigError) as raised:
        load_character(CharacterConfig(name="Mira", card=card))
    assert str(raised.value) == (f"character card {card}: not valid JSON (Expecting ',' delimiter at line 4, "
                                 "column 3)")


def test_stats_say_1_turn_not_1_turns():
    from bot.commands.usage import _totals
    from storage.ports import DayTotals

    assert _totals("Today", DayTotals(1, 10, 2, 1, 1)).startswith("Today: 1 turn, 10 tokens in, 2 out, 1 person, 1 check-in")
    assert _totals("Today", DayTotals(2, 10, 2, 2, 0)).startswith("Today: 2 turns, ")


SPEC_10_TABLES = """
[tools]
enabled = ["dice", "time", "search", "read", "remind", "picture"]
show = true
[tools.search]
url = "http://localhost:8888"
[tools.read]
max_bytes = 2000000
deny_domains = []
[[tools.mcp]]
name = "notes"
url = "http://localhost:9000/mcp"
tools = ["lookup"]

[reminders]
grace_hours = 12

[pictures]
kind = "openai"
base_url = "http://localhost:7860"
model = "flux-schnell"
per_day = 20
tokens_each = 1000

[web]
listen = "127.0.0.1"
port = 8080
public_url = "https://keepsake.example.com"

[[characters]]
name = "Mira"
card = "characters/mira.json"
tools = ["dice", "search"]
appearance = "a woman in her thirties, oilskin coat, grey braid"
"""


def test_the_tables_of_spec_10_sections_18_to_21_load_as_written(monkeypatch):
    """A config written as SPEC 10 shows it starts, [web] included (the memory page, SPEC 21)."""
    import tomllib

    monkeypatch.setenv(API_KEY_ENV, "sk-x")
    raw = {"llm": {"base_url": "http://localhost:11434/v1", "api_key_env": API_KEY_ENV}}
    raw |= tomllib.loads(SPEC_10_TABLES)
    config = checked_config(raw, ROOT)
    assert config.tools.search.url == "http://localhost:8888" and config.tools.mcp[0].tools == ("lookup",)
    assert config.reminders.grace_hours == 12 and config.pictures.per_day == 20 and config.web.port == 8080
    assert config.web.listen == "127.0.0.1"  # SPEC 21: bound to this machine unless configured
    assert config.characters[0].tools == ("dice", "search") and config.characters[0].appearance.startswith("a woman")
