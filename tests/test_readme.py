"""#36: every config example in the README works as written — each ```toml block parses, and,
set into a minimal config (the model server, and Mira's card where a block writes "# ..." for
the rest of her table), passes every check the bot makes at start-up, with each card it names
in the repository."""

import re
import tomllib

import pytest

from bot.cli import platform_settings
from bot.config import parse_config
from tests.conftest import API_KEY_ENV, ROOT

README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```toml\n(.*?)```", README, flags=re.DOTALL)
BASE = {"llm": {"base_url": "http://localhost:11434/v1", "api_key_env": API_KEY_ENV},
        "characters": [{"name": "Mira", "card": "characters/mira.json"}]}


def test_the_readme_has_config_examples():
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{n}" for n in range(1, len(BLOCKS) + 1)])
def test_each_config_example_in_the_readme_works_as_written(block, monkeypatch):
    example = tomllib.loads(block)
    for name in re.findall(r'_env = "(\w+)"', block):  # the variables it names hold something
        monkeypatch.setenv(name, "set-by-the-test")
    monkeypatch.setenv(API_KEY_ENV, "set-by-the-test")
    raw = BASE | example
    for character in raw["characters"]:
        if "card" not in character and "persona" not in character:  # "# ..." stands for the rest
            character["card"] = "characters/mira.json"
        if "card" in character:
            assert (ROOT / character["card"]).is_file(), f"{character['card']} is not in the repository"
    config = parse_config(raw, base=ROOT)
    platform_settings(config)


def test_the_systemd_unit_runs_the_bot_as_the_readme_does_and_does_not_loop_on_a_refused_token():
    import configparser

    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((ROOT / "deploy" / "keepsake.service").read_text())
    service = unit["Service"]
    assert service["ExecStart"].endswith("/.venv/bin/python -m bot --config /opt/keepsake/config.toml")
    assert "python -m bot --config config.toml" in README
    assert service["Restart"] == "on-failure"
    assert set(service["RestartPreventExitStatus"].split()) == {"1", "2"}  # every token refused; a config error
