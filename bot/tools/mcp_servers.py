"""MCP servers the owner lists (`[[tools.mcp]]`, SPEC 18), through the official `mcp` SDK: each
over streamable HTTP (`url`) or a command it starts (`command`, talking over stdin/stdout). At
start-up each is asked for its tools once; only those the owner named are offered, with the
server's own schema. A server that is down then is one WARNING, and its tools are absent —
never a crash. Each call opens its own session (a server restarted meanwhile is simply reached
again); what a tool answers is outside text, fenced as data by the toolbox."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mcp import Client, StdioServerParameters

from bot.config import MCPServerConfig
from bot.tools.toolbox import Outcome, TurnScope, result

log = logging.getLogger(__name__)
TIMEOUT_S = 30.0
START_TIMEOUT_S = 10.0


def _target(server: MCPServerConfig) -> str | StdioServerParameters:
    if server.url is not None:
        return server.url
    return StdioServerParameters(command=server.command[0], args=list(server.command[1:]))


def _reason(failure: BaseException) -> str:
    """What went wrong, in one phrase (the SDK's task groups wrap the cause in exception groups)."""
    while isinstance(failure, BaseExceptionGroup) and failure.exceptions:
        failure = failure.exceptions[0]
    return f"{type(failure).__name__}: {failure}" if str(failure) else type(failure).__name__


class MCPTool:
    """One tool of an MCP server, offered as its server describes it."""

    guidance = ""

    def __init__(self, server: MCPServerConfig, name: str, description: str, schema: dict[str, Any]):
        self.server = server
        self.name = name
        self.spec = {"type": "function", "function": {
            "name": name, "description": (description or f"{name} (from {server.name})")[:1000],
            "parameters": schema or {"type": "object", "properties": {}}}}

    def offered(self, scope: TurnScope) -> bool:
        return True

    async def run(self, scope: TurnScope, arguments: dict[str, Any]) -> str | Outcome:
        try:
            async with asyncio.timeout(TIMEOUT_S):
                async with Client(_target(self.server)) as client:
                    answer = await client.call_tool(self.name, arguments)
        except Exception as failure:  # a server down, slow or broken: the model reads that it failed
            log.warning("MCP server %s: %s failed (%s)", self.server.name, self.name, _reason(failure))
            return result(error=f"{self.name} did not answer; say so, do not make its answer up")
        text = "\n".join(getattr(part, "text", "") for part in answer.content if getattr(part, "text", ""))
        if answer.is_error:
            return Outcome(result(error=text or f"{self.name} failed"), shown=f"🧰 {self.server.name}: {self.name}",
                           outside=f"the MCP server {self.server.name}")
        return Outcome(text or "(no text in the answer)", shown=f"🧰 {self.server.name}: {self.name}",
                       outside=f"the MCP server {self.server.name}")


async def discover(servers: tuple[MCPServerConfig, ...]) -> list[MCPTool]:
    """The named tools of every server that answers now; one WARNING for each that does not,
    and for each named tool a server does not have."""
    tools: list[MCPTool] = []
    for server in servers:
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                async with Client(_target(server)) as client:
                    listed = (await client.list_tools()).tools
        except Exception as failure:
            where = server.url or " ".join(server.command)
            log.warning("MCP server %s (%s) did not answer at start-up (%s); its tools are left out until "
                        "the next start", server.name, where, _reason(failure))
            continue
        by_name = {tool.name: tool for tool in listed}
        for name in server.tools:
            if name not in by_name:
                log.warning("MCP server %s has no tool named %r (it has: %s)", server.name, name,
                            ", ".join(sorted(by_name)) or "none")
                continue
            tool = by_name[name]
            tools.append(MCPTool(server, name, tool.description or "", dict(tool.input_schema or {})))
    return tools
