"""Command line: `python -m bot --config config.toml` runs the bot;
`python -m bot console --character NAME` chats in the terminal;
`python -m bot characters list` lists the characters of the config and the database;
`python -m bot characters remove NAME` removes a character (its memories become global)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from bot.config import ConfigError, load_config
from bot.logs import config_secrets, redact, setup_logging


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help="path to config.toml")
    parser = argparse.ArgumentParser(prog="python -m bot", parents=[common],
                                     description="Keepsake: a character chat bot that remembers.")
    parser.set_defaults(config="config.toml")
    parser.add_argument("--log-level", default=os.environ.get("KEEPSAKE_LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command")
    console = sub.add_parser("console", parents=[common], help="chat with a character in the terminal")
    console.add_argument("--character", required=True, help="the character's name from the config")
    console.add_argument("--name", default=os.environ.get("USER") or "you", help="your display name")
    characters = sub.add_parser("characters", parents=[common], help="manage characters")
    characters.add_argument("action", choices=["list", "remove"])
    characters.add_argument("name", nargs="?", help="the character to remove")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "characters" and args.action == "remove" and not args.name:
        _parser().error("characters remove: which character? (python -m bot characters remove NAME)")
    setup_logging("WARNING" if args.command in ("console", "characters") else args.log_level)
    try:
        config = load_config(args.config, needs_llm=args.command != "characters")
        redact(config_secrets(config))
        if args.command == "console":
            from adapters.console import run_console

            return asyncio.run(run_console(config, args.character, args.name))
        if args.command == "characters":
            from bot.admin import list_characters, remove_character

            if args.action == "list":
                return asyncio.run(list_characters(config))
            return asyncio.run(remove_character(config, args.name))
        from bot.app import run_bot

        return asyncio.run(run_bot(config))
    except ConfigError as problem:
        print(f"config error: {problem}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
