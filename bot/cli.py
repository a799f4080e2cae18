"""The command line — the one place that starts things:

- `python -m bot --config config.toml` runs every adapter that has a token, until SIGINT/SIGTERM;
- `python -m bot console --character NAME` chats in the terminal, through the same runtime;
- `python -m bot page` serves only the memory page (`[web]`), from the database: a bot starts one
  beside itself (bot/page/process.py), and more may run anywhere the database is reached;
- `python -m bot characters list` / `… remove NAME` manage characters (no API key needed).
- `python -m bot storage copy --from sqlite:///… --to postgresql://…` moves a deployment into
  PostgreSQL (storage/copy.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from bot import metrics
from bot.config import Config, ConfigError, WebConfig, checked, load_config
from bot.contract import Core, MemoryPage, PlatformRefused, cannot_listen
from bot.logs import config_secrets, log_to_file, redact, setup_logging
from bot.memory.saved_memories import CAPS
from bot.model.server_context import fit_to_server
from bot.page.process import BESIDE_BOT, LISTENING, PAGE_NICENESS, PageProcess, until_the_bot_is_gone
from bot.runtime import Runtime, build_runtime
from storage.factory import StorageURLError, masked, open_store

if TYPE_CHECKING:
    from adapters.registry import AdapterStarter, Platform
    from adapters.web.server import PageServer

log = logging.getLogger(__name__)


def login_name() -> str:
    """Who runs the console, as the machine names them: $USER, $LOGNAME, else the account itself
    (a container sets no $USER); "Guest" only when the machine cannot tell."""
    try:
        return getpass.getuser()
    except Exception:  # no variable, and no account entry for this user id
        return "Guest"


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help="path to config.toml")
    parser = argparse.ArgumentParser(prog="python -m bot", parents=[common],
                                     description="Keepsake: a character chat bot that remembers.")
    parser.add_argument("--log-level", default=os.environ.get("KEEPSAKE_LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command")
    console = sub.add_parser("console", parents=[common], help="chat with a character in the terminal")
    console.add_argument("--character", required=True, help="the character's name from the config")
    console.add_argument("--name", default=login_name(),
                         help="your name — also who you are to Keepsake: memories saved as --name Sam "
                              "are Sam's, and seen again only with --name Sam (default: your login name)")
    console.add_argument("--verbose", action="store_true", help="show log lines in the terminal, not in a file")
    console.add_argument("--model", help="use this model instead of [llm] model (e.g. one you pulled into Ollama)")
    console.add_argument("--base-url", help="use this model server instead of [llm] base_url "
                                            "(e.g. http://localhost:8080/v1 for llama.cpp's server)")
    page = sub.add_parser("page", parents=[common], help="serve only the memory page ([web]) from the database")
    page.add_argument(BESIDE_BOT, action="store_true", help=argparse.SUPPRESS)  # ends when its stdin closes
    storage = sub.add_parser("storage", help="move a deployment to another database")
    storage.add_argument("action", choices=["copy"])
    storage.add_argument("--from", dest="source", required=True, help="sqlite:///data/keepsake.sqlite3")
    storage.add_argument("--to", dest="target", required=True, help="postgresql://user@host:5432/keepsake")
    storage.add_argument("--allow-non-empty", action="store_true",
                         help="the target holds this deployment already (an earlier copy of this file, "
                              "since moved): rows with the same ids are the same rows")
    characters = sub.add_parser("characters", parents=[common], help="manage characters")
    characters.add_argument("action", choices=["list", "remove"])
    characters.add_argument("name", nargs="?", help="the character to remove")
    return parser


def main(argv: list[str] | None = None) -> int:
    import adapters.registry  # noqa: F401 — importing it declares the platforms' traits, before a config is read

    args = _parser().parse_args(argv)
    # `--config` may come before the command or after it (a subcommand's defaults would otherwise
    # overwrite one given before it, #62): whichever was given, else config.toml
    args.config = getattr(args, "config", "config.toml")
    if args.command == "storage":
        return asyncio.run(copy_storage(args.source, args.target, args.allow_non_empty))
    if args.command == "characters" and args.action == "remove" and not args.name:
        _parser().error("characters remove: which character? (python -m bot characters remove NAME)")
    quiet = args.command == "characters" or (args.command == "console" and not args.verbose)
    setup_logging("WARNING" if quiet else args.log_level)
    try:
        config = load_config(args.config, needs_llm=args.command != "characters")
        if args.command == "console" and args.model:
            config = config.changed("llm", model=args.model)
        if args.command == "console" and args.base_url:
            if not args.base_url.lower().startswith(("http://", "https://")):
                raise ConfigError(f"--base-url: expected an address starting with http:// or https://, "
                                  f"got {args.base_url!r}")
            config = config.changed("llm", base_url=args.base_url)
        log_file = None
        if args.command == "console" and not args.verbose:  # log lines would land in the chat
            log_file = config.storage.base / "keepsake-console.log"
            log_to_file(log_file)
            print(f"(Keepsake) Log lines go to {log_file}; --verbose shows them here.")
        page = PageProcess(Path(args.config), args.log_level, log_file)  # [web]: the page beside the bot
        platforms = platform_settings(config)  # every platform key is checked, whatever runs
        redact(config_secrets(config) | {secret for *_, settings in platforms for secret in settings.secrets()})
        if args.command == "console":
            with terminal_kept():
                return asyncio.run(run_console(config, args.character, args.name, page))
        if args.command == "characters":
            if args.action == "list":
                return asyncio.run(list_characters(config))
            return asyncio.run(remove_character(config, args.name))
        if args.command == "page":
            return asyncio.run(run_page(config, args.beside_bot))
        return asyncio.run(run_bot(config, page))
    except ConfigError as problem:
        print(f"config error: {problem}", file=sys.stderr)
        return 2
    except StorageURLError as problem:
        print(f"storage error: {problem}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


# -- the bot ------------------------------------------------------------------------------
async def run_bot(config: Config, page_process: PageProcess) -> int:
    """Run every adapter that has a token until SIGINT/SIGTERM (exit 0), or until every adapter
    has stopped for good because its platform refused it (exit 1, so a supervisor notices)."""
    adapters = platform_adapters(config)
    for unset in unset_tokens(config):
        log.warning(unset)
    host = config.platforms.get("discord", {}).get("host_token_env")
    if isinstance(host, str) and not os.environ.get(host):
        log.warning("[discord] host_token_env names %s, which is not set: the characters without a Discord bot of "
                    "their own stay off Discord", host)
    if not adapters:
        names = ", ".join(token_variables(config))
        log.error("no platform adapter can start: set a bot token in %s, or chat in the terminal "
                  "with: python -m bot console --character NAME", names or "a *_token_env variable")
        return 1
    config = await fit_to_server(config)  # the context the model server really holds (SPEC 8)
    async with await build_runtime(config, platforms=character_platforms(config)) as runtime:
        for silent in talking_nowhere(config, runtime.gate.age_restricted):
            log.warning(silent)
        await runtime.llm.probe()  # before the background work starts: how many requests the server answers at once
        runtime.start()
        if runtime.voice is not None:
            await runtime.voice.probe()
        if config.metrics.port is not None:
            serve_metrics(config.metrics.port, config.metrics.listen, runtime)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        page = await serve_page(config, page_process, runtime, stop, chat_platforms=True)  # before anyone asks for a link
        tasks = [asyncio.create_task(_supervised(name, start, runtime.core, stop)) for name, start in adapters]
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({stopping, asyncio.gather(*tasks)}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            log.info("stopping")
            runtime.store.turns.leave_lines()  # waiting turns are answered after the restart (SPEC 9)
            runtime.abandon_in_flight()  # a hanging audio or outside server holds up no exit (SPEC 16, 18)
            stop.set()
            await asyncio.gather(*tasks, *([page] if page else []), return_exceptions=True)
            stopping.cancel()
    if all(task.result() is False for task in tasks):
        log.error("no platform adapter is left running; stopping with exit status 1")
        return 1
    return 0


def serve_metrics(port: int, listen: str, runtime: Runtime) -> None:
    """`/metrics` on [metrics] port; a port it cannot bind is one ERROR naming `metrics.port`, and
    the bot goes on talking without it (as without its page: `serve_page`)."""
    metrics.count_pending_summaries(runtime.summarizer.pending)
    try:
        metrics.serve(port, listen)
    except OSError as problem:
        log.error("%s; /metrics is not served", cannot_listen("metrics", "/metrics", listen, port, problem))
        return
    log.info("metrics at http://%s:%d/metrics", listen, port)


def platform_settings(config: Config) -> list[tuple["Platform", str, Any]]:
    """(platform, character, settings) of every adapter the config runs: each character's
    accounts that have a token set. The platform tables and keys are checked here by their
    adapters' types (adapters/settings.py), with the same one-line errors as the core's."""
    from adapters.registry import PLATFORMS

    names = {platform.name for platform in PLATFORMS}
    for key in config.platforms:
        if key == "character":
            raise ConfigError("character: unknown table [[character]]; the characters are [[characters]] tables")
        if key not in names:
            raise ConfigError(f"{key}: unknown key (check its spelling)")
    character_keys = {key for platform in PLATFORMS for key in platform.character.model_fields}
    found: list[tuple[Platform, str, Any]] = []
    for platform in PLATFORMS:
        section = checked(platform.section, config.platforms.get(platform.name, {}), (platform.name,))
        for i, character in enumerate(config.characters):
            keys = character.platform_keys
            for key in keys:
                if key not in character_keys:
                    raise ConfigError(f"characters[{i}].{key}: unknown key (check its spelling)")
            mine = {key: value for key, value in keys.items() if key in platform.character.model_fields}
            _one_bot_each(config, i, mine)
            settings = platform.settings(section, checked(platform.character, mine, ("characters", i)))
            if settings is not None:
                found.append((platform, character.name, settings))
    return found


def _one_bot_each(config: Config, i: int, keys: dict[str, Any]) -> None:
    """Two characters on one bot token answer as one bot (Telegram refuses the second poller
    with 409 Conflict): each `*_token_env` names a variable no earlier character names."""
    for key, variable in keys.items():
        if not key.endswith("_token_env"):
            continue
        for j, other in enumerate(config.characters[:i]):
            if other.platform_keys.get(key) == variable:
                raise ConfigError(f"characters[{i}].{key}: {variable} is also characters[{j}]'s ({other.name}); "
                                  "each character needs a bot of its own (or, on Discord, leave it out and "
                                  "set [discord] host_token_env)")


def platform_adapters(config: Config) -> list[tuple[str, "AdapterStarter"]]:
    """The adapters the config runs, named `platform:character` (Discord's host bot, which
    voices several: `discord:Mira+Aki`)."""
    found = platform_settings(config)
    adapters: list[tuple[str, AdapterStarter]] = []
    voiced: list[tuple[str, ...]] = []  # the characters of each adapter, in the order it voices them
    for platform in dict.fromkeys(platform for platform, _, _ in found):
        mine = [(name, settings) for each, name, settings in found if each is platform]
        for names, settings in platform.adapters(mine):
            voiced.append(names)
            adapters.append((f"{platform.name}:{'+'.join(names)}", platform.adapter(names, settings)))
    # SPEC 14: a bot voicing several characters (Discord's host) has DMs with the first only
    with_dms = {names[0] for names in voiced}
    for i, character in enumerate(config.characters):
        if character.checkins is not None and character.name not in with_dms:
            host = next((names for names in voiced if character.name in names), None)
            if host is not None:
                raise ConfigError(f"characters[{i}].checkins: {character.name} is voiced by a bot whose DMs are "
                                  f"{host[0]}'s (the first character it voices), so {character.name} cannot "
                                  f"write first anywhere; give {character.name} a bot of its own, or remove it")
    return adapters


def page_server(web: WebConfig, page: MemoryPage) -> "PageServer":
    """The memory page's server as `[web]` describes it."""
    from adapters.web.server import PageServer

    return PageServer(page, web.secure, web.origin, web.path, web.trusted_proxies)


async def serve_page(config: Config, page: PageProcess, runtime: Runtime, stop: asyncio.Event,
                     chat_platforms: bool) -> asyncio.Task | None:
    """The memory page (SPEC 21) in a process of its own beside this one, until `stop`; None
    without `[web]`. A port it cannot bind is its ERROR naming `web.port` (SPEC 21 "Named, not
    silent"), and `/memory page` then says the page is not available, never a link to whatever
    holds the port."""
    if config.web is None:
        return None
    if not await page.start():
        runtime.commands.page.served = False
        return None
    if config.web.public_url is None and chat_platforms:
        log.warning("[web] has no public_url: /memory page links point at %s, which opens only on this machine",
                    config.web.address)
    return asyncio.create_task(page.serve(stop))


async def run_page(config: Config, beside_bot: bool) -> int:
    """Serve only the memory page, from the database (no platform, no background work), until
    SIGINT/SIGTERM — or, started by a bot, until the bot closes this process's stdin."""
    if config.web is None:
        log.error("python -m bot page: the config has no [web] table, so there is no page to serve")
        return 2
    if beside_bot:
        os.nice(PAGE_NICENESS)  # when both want the CPU, the bot's turns go first
    # No tool is set up: the page runs no turn (and an MCP server is the bot's to start).
    async with await build_runtime(config.changed("tools", enabled=(), mcp=()),
                                   platforms=character_platforms(config)) as runtime:
        try:
            stop_serving = await page_server(config.web, runtime.core.page).start(config.web.listen, config.web.port)
        except OSError as problem:
            log.error("%s; it is not served, and /memory page says so",
                      cannot_listen("web", "the memory page", config.web.listen, config.web.port, problem))
            return 3
        print(LISTENING, flush=True)
        if beside_bot:  # the bot reads only that line: anything printed later goes where the log lines go
            os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        watching = asyncio.create_task(until_the_bot_is_gone() if beside_bot else stop.wait())
        try:
            await asyncio.wait({watching, asyncio.create_task(stop.wait())}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watching.cancel()
            await stop_serving()
    return 0


def character_platforms(config: Config) -> dict[str, str]:
    """Where each character runs, for the owner's page: "Discord, Telegram"."""
    found = platform_settings(config)
    return {character.name: ", ".join(platform.name.capitalize() for platform, name, _ in found
                                      if name == character.name) or "—" for character in config.characters}


def unset_tokens(config: Config) -> list[str]:
    """A line for each bot token variable a character names that is not set (#47: a platform
    left out is never silent)."""
    return [f"{character.name}: {value} (characters[{i}].{key}) is not set, so {character.name} is not on "
            f"{key.removesuffix('_token_env').capitalize()}; set it to the bot's token, or remove the key"
            for i, character in enumerate(config.characters) for key, value in character.platform_keys.items()
            if key.endswith("_token_env") and isinstance(value, str) and not os.environ.get(value)]


def talking_nowhere(config: Config, age_restricted: frozenset[str]) -> list[str]:
    """A line for each age-restricted character on Telegram without `[telegram] allow_nsfw`:
    it would answer no one there (#47: say so in plain words, with the key that changes it)."""
    if config.platforms.get("telegram", {}).get("allow_nsfw") is True:
        return []
    return [f"{character.name} is an age-restricted character (nsfw) and will answer no one on Telegram: "
            "Telegram has no age-restricted chats; set [telegram] allow_nsfw = true to let it talk there"
            for character in config.characters if character.name.casefold() in age_restricted
            and isinstance(character.platform_keys.get("telegram_token_env"), str)]


def token_variables(config: Config) -> list[str]:
    """The variables the config names for bot tokens (`MIRA_TELEGRAM_TOKEN`)."""
    return [value for character in config.characters for key, value in character.platform_keys.items()
            if key.endswith("_token_env") and isinstance(value, str)]


async def _supervised(name: str, start: "AdapterStarter", core: Core, stop: asyncio.Event) -> bool:
    """Run one adapter; if it fails, say so and try again after a pause, until the bot stops.
    False when its platform refused it for good (a revoked token): that is not retried."""
    delay = 5.0
    while not stop.is_set():
        try:
            await start(core, stop)
            return True
        except asyncio.CancelledError:
            raise
        except PlatformRefused as refused:
            log.error("%s stopped for good: %s", name, refused)
            return False
        except Exception as failure:
            # Secrets in the text (python-telegram-bot puts the token into InvalidToken's) are
            # masked by the log formatter; see bot/logs.py.
            log.error("%s stopped: %s: %s; restarting in %.0f s", name, type(failure).__name__, failure, delay)
        try:
            await asyncio.wait_for(stop.wait(), delay)
        except asyncio.TimeoutError:
            delay = min(delay * 2, 300.0)
    return True


# -- the console --------------------------------------------------------------------------
@contextlib.contextmanager
def terminal_kept() -> Iterator[None]:
    """Give the terminal back as it was, whichever way the console ends (/quit, Ctrl-C, Ctrl-D,
    an error): the line-reading thread may still be inside readline, which turns echo off."""
    if not sys.stdin.isatty():
        yield
        return
    import termios

    saved = termios.tcgetattr(sys.stdin.fileno())
    try:
        yield
    finally:
        termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)


async def run_console(config: Config, character: str, user_name: str, page_process: PageProcess) -> int:
    from adapters.console import Console, stdin_lines

    config.character(character)  # a clear error for an unknown name
    config = await fit_to_server(config)  # the context the model server really holds (SPEC 8)
    async with await build_runtime(config) as runtime:
        for silent in talking_nowhere(config, runtime.gate.age_restricted):
            log.warning(silent)
        for problem in await runtime.llm.probe():  # said where the person is, not only in the log file
            print(f"(Keepsake) {problem[0].upper()}{problem[1:]}.")
        runtime.start()
        stop = asyncio.Event()
        page = await serve_page(config, page_process, runtime, stop, chat_platforms=False)
        try:
            await Console(runtime.core, character, user_name).run(stdin_lines())
        finally:
            stop.set()
            if page is not None:
                await asyncio.gather(page, return_exceptions=True)
    return 0


# -- storage copy -------------------------------------------------------------------------
async def copy_storage(source: str, target: str, allow_non_empty: bool) -> int:
    """Copy a deployment between databases with a progress bar; relative SQLite paths are from
    the current directory."""
    from storage.copy import CopyError, copy_store

    try:
        report = await copy_store(source, target, Path("."), allow_non_empty, progress=_progress_bar)
    except (CopyError, StorageURLError, OSError) as problem:
        print(f"\nstorage copy: {problem}", file=sys.stderr)
        return 1
    rows = sum(report.counts.values())
    print(f"\nCopied and checked {rows:,} rows in {len(report.counts)} tables: "
          f"{report.counts['persons']:,} people, {report.counts['messages']:,} messages, "
          f"{report.counts['memories']:,} memories.")
    return 0


def _progress_bar(table: str, done: int, total: int, width: int = 30) -> None:
    filled = width * done // total if total else width
    sys.stderr.write(f"\r{table:<18} [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,}\033[K")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


# -- characters ---------------------------------------------------------------------------
async def list_characters(config: Config) -> int:
    """The characters of the config and of the database, with their character memories."""
    store = await open_store(config.storage.url, CAPS, config.storage.base, password=config.storage.password)
    try:
        stored = await store.characters.character_memory_counts()
    finally:
        await store.close()
    configured = {c.name.casefold() for c in config.characters}
    names = [c.name for c in config.characters] + [n for n in stored if n.casefold() not in configured]
    counts = {n.casefold(): count for n, count in stored.items()}
    for name in names:
        where = "in the config" if name.casefold() in configured else "only in the database (removed from the config)"
        memories = counts.get(name.casefold(), 0)
        print(f"{name}: {where}; {memories} character {'memory' if memories == 1 else 'memories'}")
    return 0


async def remove_character(config: Config, name: str) -> int:
    """Delete a character's conversations; its character-scoped memories become global."""
    store = await open_store(config.storage.url, CAPS, config.storage.base, password=config.storage.password)
    try:
        moved = await store.characters.remove_character(name)
    finally:
        await store.close()
    if moved is None:
        print(f"There is no character named {name!r} in {masked(config.storage.url)}.")
        return 1
    print(f"Removed {name}. {moved} character memories became global memories.")
    if any(c.name.casefold() == name.casefold() for c in config.characters):
        print(f"{name} is still in the config: remove its [[characters]] table too, "
              "or it comes back at the next start.")
    return 0
