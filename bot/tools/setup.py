"""The tools of this deployment, from the config (SPEC 18): the built-in ones `[tools] enabled`
names (each that can run here: `search` needs `[tools.search] url`, `picture` a `[pictures]`
table), and the named tools of the MCP servers that answer at start-up. Every one that talks to
the outside does so through the process's one outside client (`outside`). Which a character may
use: its own `tools`, else all of them; the memory tools (SPEC 5) always."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Sequence

from bot.config import BUILT_IN_TOOLS, Config, MCPServerConfig
from bot.tools.clock import Clock
from bot.tools.dice import Dice
from bot.tools.picture import ImageServer, Picturing
from bot.tools.remind import Remind
from bot.tools.egress import Egress
from bot.tools.outside import Outside
from bot.tools.toolbox import Tool
from bot.tools.web import Read, Search
from storage.ports import Store

log = logging.getLogger(__name__)


@dataclass
class Configured:
    """The tools that can run now; the MCP servers that did not answer at start-up (asked again in
    the background: bot/tools/mcp_servers.py `LateServers`) and the tool names already taken."""

    tools: list[Tool]
    silent: list[MCPServerConfig] = field(default_factory=list)
    names: frozenset[str] = frozenset()


async def configured_tools(config: Config, store: Store, give_back_picture: Callable[[int, int], Awaitable[None]],
                           outside: Outside,
                           egress: Egress | None = None, taken: Sequence[str] = (),
                           age_restricted: frozenset[str] = frozenset()) -> Configured:
    """The built-in tools `[tools] enabled` names that can run here, then the MCP servers' tools
    (SPEC 18 "MCP servers stay in their lane": one named like a built-in tool or one of `taken`,
    the memory tools, is left out with a WARNING)."""
    settings = config.tools
    for unusable in unusable_tools(config):
        log.warning(unusable)
    tools: list[Tool] = []
    for name in settings.enabled:
        if name == "dice":
            tools.append(Dice())
        elif name == "time":
            tools.append(Clock())
        elif name == "read":
            tools.append(Read(egress or Egress(settings.read.max_bytes, settings.read.deny_domains, outside=outside)))
        elif name == "search" and settings.search is not None:
            tools.append(search := Search(settings.search.url, outside))
            if problem := await search.check():  # kept: the instance may be fixed while the bot runs
                log.warning(problem)
        elif name == "remind":
            tools.append(Remind(store.reminders))
        elif name == "picture" and config.pictures is not None:
            tools.append(Picturing(ImageServer(config.pictures, config.llm, outside),
                                   {c.name: c.appearance for c in config.characters if c.appearance},
                                   give_back_picture, age_restricted))
    if not settings.mcp:
        return Configured(tools)
    # the MCP SDK is loaded only for a deployment that lists servers (it takes ~0.8 s and ~45 MB)
    from bot.tools.mcp_servers import discover

    names = {*taken, *(tool.name for tool in tools)}
    found, silent = await discover(settings.mcp, outside)
    for tool in found:
        if tool.name in names:
            log.warning("MCP server %s: its tool %r has the name of a built-in or memory tool; it is left out",
                        tool.server.name, tool.name)
            continue
        names.add(tool.name)
        tools.append(tool)
    return Configured(tools, silent, frozenset(names))


def unusable_tools(config: Config) -> list[str]:
    """A line for each tool the config asks for that cannot run, and each it leaves out while
    setting it up (#62: a feature never switches itself off without a word): `search` named
    without `[tools.search] url`, `picture` without `[pictures]`, `[pictures]` with `picture` left
    out of `[tools] enabled`, and a character's `tools` naming one `enabled` leaves out."""
    settings, lines = config.tools, []
    written = "enabled" in settings.model_fields_set  # the default names every tool: nothing to say
    if written and "search" in settings.enabled and settings.search is None:
        lines.append("tools.enabled names search, but [tools.search] url is not set: search is off")
    if written and "picture" in settings.enabled and config.pictures is None:
        lines.append("tools.enabled names picture, but there is no [pictures] table: pictures are off")
    if config.pictures is not None and "picture" not in settings.enabled:
        lines.append("[pictures] is set, but tools.enabled leaves out picture: no picture is drawn (add \"picture\")")
    for i, character in enumerate(config.characters):
        for name in character.tools or ():
            if name in BUILT_IN_TOOLS and name not in settings.enabled:
                lines.append(f"characters[{i}].tools names {name}, which tools.enabled leaves out: {character.name} "
                             f"does not get it")
    return lines


def allowed_tools(config: Config, always: Sequence[Tool]) -> dict[str, frozenset[str]]:
    """Each character that names its own `tools`: those, and the `always` ones (casefolded name →
    tool names); a character that names none may use every tool."""
    kept = frozenset(tool.name for tool in always)
    return {character.name.casefold(): frozenset(character.tools) | kept
            for character in config.characters if character.tools is not None}
