"""#36: every config example in the README and its reference pages (docs/) works as written — each ```toml block parses, and,
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
PAGES = [README] + [page.read_text() for page in sorted((ROOT / "docs").glob("*.md"))]  # the README's reference pages
BLOCKS = [block for page in PAGES for block in re.findall(r"```toml\n(.*?)```", page, flags=re.DOTALL)]
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


def test_ci_runs_the_readmes_test_command_as_it_is_written():
    command = re.search(r"\*\*Run the tests\*\*.*?```sh\n(.*?)\n```", README, flags=re.DOTALL).group(1)
    pytest_command = command.rsplit("&& ", 1)[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert pytest_command == "pytest -n 2" and ci[-1] == pytest_command
    assert "pip install --quiet -e '.[dev]'" in ci  # the README's install, quietly


def test_the_systemd_unit_runs_the_bot_as_the_readme_does_and_does_not_loop_on_a_refused_token():
    import configparser

    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((ROOT / "deploy" / "keepsake.service").read_text())
    service = unit["Service"]
    assert service["ExecStart"].endswith("/.venv/bin/python -m bot --config /opt/keepsake/config.toml")
    assert "python -m bot --config config.toml" in README
    assert service["Restart"] == "on-failure"
    assert set(service["RestartPreventExitStatus"].split()) == {"1", "2"}  # every token refused; a config error


@pytest.mark.timeout(120)
async def test_the_telegram_with_ollama_guide_followed_literally_ends_in_a_reply(tmp_path, llm, telegram):
    """#36: the guide's config as written, in a folder with Keepsake's characters, its token in
    the variable it names and no API key variable: the README's run command answers on Telegram.
    Only the two servers' addresses point at the fakes."""
    import asyncio
    import os
    import shutil
    import sys

    from tests.fakes.llm_server import text
    from tests.process import final_reply_to, logged, stop_bot

    guide = README.split("## Telegram with Ollama, step by step")[1].split("\n## ")[0]
    block, = re.findall(r"```toml\n(.*?)```", guide, flags=re.DOTALL)
    command = re.search(r"\*\*Run it\*\*: `\. \.venv/bin/activate && (python -m bot [^`]*)`", guide).group(1).split()
    config = block.replace("http://localhost:11434/v1", llm.base_url)
    config += f'\n[telegram]\nbase_url = "{telegram.base_url}"\n'  # the fake Bot API instead of Telegram's
    (tmp_path / "config.toml").write_text(config)
    shutil.copytree(ROOT / "characters", tmp_path / "characters")
    llm.model = "llama3.1"
    env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV and k != "OPENAI_API_KEY"} | {
        "PYTHONPATH": str(ROOT), "MIRA_TELEGRAM_TOKEN": telegram.token, "KEEPSAKE_LOG_LEVEL": "INFO"}
    process = await asyncio.create_subprocess_exec(sys.executable, *command[1:], cwd=tmp_path, env=env,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        assert "@mira_bot" in await logged(process, "Telegram: Mira is online as")
        ann, ann_dm = telegram.user(1201, "Ann"), telegram.chat(1201)
        llm.add(text("Welcome to the lighthouse, Ann."))
        reply = await final_reply_to(telegram, 1201, telegram.send(ann_dm, ann, "hello Mira"))
        assert reply.text == "Welcome to the lighthouse, Ann." and llm.requests[-1]["model"] == "llama3.1"
    finally:
        await stop_bot(process)


def test_the_consoles_log_file_is_never_committed():
    """#36: `python -m bot console` logs to keepsake-console.log beside the config."""
    assert "keepsake-console.log" in (ROOT / ".gitignore").read_text().split()


def test_the_readmes_console_example_is_the_start_of_the_recorded_session_line_for_line():
    """#62: the README's console example drops no line the real console prints: it is the start of
    docs/console.md, which tests/test_console_transcript.py types through a pseudo-terminal."""
    shown = README.split("What the console looks like")[1].split("```text\n", 1)[1].split("```", 1)[0]
    recorded = (ROOT / "docs" / "console.md").read_text().split("```text\n", 1)[1].split("```", 1)[0]
    assert len(shown.splitlines()) >= 10 and recorded.startswith(shown)
