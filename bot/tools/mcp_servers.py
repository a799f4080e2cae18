"""MCP servers the owner lists (`[[tools.mcp]]`, SPEC 18), through the official `mcp` SDK: each
over streamable HTTP (`url`) or a command it starts (`command`, talking over stdin/stdout). At
start-up each is asked for its tools once; only those the owner named are offered, with the
server's own schema. A server that is down then is one WARNING, and its tools are absent —
never a crash. Each call opens its own session (a server restarted meanwhile is simply reached
again).

They stay in their lane (SPEC 18 "MCP servers stay in their lane"):
- every call is an outside call of the process's one client (bot/tools/outside.py): TIMEOUT_S in
  all, abandoned on stop; over HTTP the SDK's requests go through `bounded_transport`, so an
  answer is decoded here and capped at MAX_ANSWER bytes whatever its layers;
- what a tool answers, and its errors, are outside text (the toolbox fences them: an MCP tool is
  not `local`), cut to MAX_TEXT characters first;
- a command server's stderr reaches the log capped: STDERR_LINES lines of STDERR_LINE_CHARS a call;
- a tool's description is cut to MAX_DESCRIPTION characters, and a tool whose input schema is over
  MAX_SCHEMA_CHARS (as JSON) is left out with a WARNING: both go into every model request;
- a tool named like a built-in or memory tool is left out (bot/tools/setup.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from typing import Any, AsyncIterator, Callable, Sequence

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from bot.config import MCPServerConfig
from bot.tools.outside import Outside, bounded_transport
from bot.tools.toolbox import Outcome, TurnScope, result

log = logging.getLogger(__name__)
TIMEOUT_S = 30.0
START_TIMEOUT_S = 10.0
ASK_AGAIN_S = 60  # a server that did not answer at start-up is asked again this often
MAX_ANSWER = 1_000_000  # bytes of one answer over HTTP, decoded
MAX_TEXT = 20_000  # characters of a tool's answer, before the toolbox cuts it to its token budget
MAX_DESCRIPTION = 1_000
MAX_SCHEMA_CHARS = 4_000
STDERR_LINES = 20
STDERR_LINE_CHARS = 300


class _CappedLog(asyncio.Protocol):
    """A command server's stderr: its first STDERR_LINES lines (each cut) logged, the rest read
    and dropped (so the server never blocks on a full pipe)."""

    def __init__(self, server: str):
        self.server = server
        self.lines = 0
        self.pending = b""

    def data_received(self, data: bytes) -> None:
        if self.lines >= STDERR_LINES:
            return
        self.pending = (self.pending + data)[-4 * STDERR_LINE_CHARS:]
        *whole, self.pending = self.pending.split(b"\n")
        for line in whole:
            self._log(line)

    def eof_received(self) -> bool:
        if self.pending:
            self._log(self.pending)
        return False

    def _log(self, line: bytes) -> None:
        if self.lines >= STDERR_LINES:
            return
        self.lines += 1
        said = line.decode("utf-8", errors="replace").strip()[:STDERR_LINE_CHARS]
        if said:
            log.info("MCP server %s says: %s", self.server, said)
        if self.lines == STDERR_LINES:
            log.info("MCP server %s: the rest of what it writes to stderr is not logged", self.server)


@contextlib.asynccontextmanager
async def _stderr_for(server: str) -> AsyncIterator[Any]:
    """A file for a command server's stderr, read into the log capped."""
    read_end, write_end = os.pipe()
    reader = os.fdopen(read_end, "rb", buffering=0)
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(lambda: _CappedLog(server), reader)
    errlog = os.fdopen(write_end, "w")
    try:
        yield errlog
    finally:
        errlog.close()
        transport.close()


@contextlib.asynccontextmanager
async def connected(server: MCPServerConfig) -> AsyncIterator[Client]:
    """A session with the server, over bounded HTTP or its command's stdin/stdout."""
    async with contextlib.AsyncExitStack() as stack:
        if server.url is not None:
            import httpx2  # the SDK's own HTTP library

            http = await stack.enter_async_context(httpx2.AsyncClient(
                transport=bounded_transport(httpx2, httpx2.AsyncHTTPTransport(), MAX_ANSWER),
                timeout=httpx2.Timeout(TIMEOUT_S)))
            target: Any = streamable_http_client(server.url, http_client=http)
        else:
            errlog = await stack.enter_async_context(_stderr_for(server.name))
            target = stdio_client(StdioServerParameters(command=server.command[0], args=list(server.command[1:])),
                                  errlog=errlog)
        yield await stack.enter_async_context(Client(target))


def _reason(failure: BaseException) -> str:
    """What went wrong, in one phrase (the SDK's task groups wrap the cause in exception groups)."""
    while isinstance(failure, BaseExceptionGroup) and failure.exceptions:
        failure = failure.exceptions[0]
    return (f"{type(failure).__name__}: {failure}" if str(failure) else type(failure).__name__)[:300]


class MCPTool:
    """One tool of an MCP server, offered as its server describes it (cut to size)."""

    guidance = ""

    def __init__(self, server: MCPServerConfig, name: str, description: str, schema: dict[str, Any],
                 outside: Outside):
        self.server = server
        self.name = name
        self.source = f"the MCP server {server.name}"
        self.outside = outside
        self.spec = {"type": "function", "function": {
            "name": name, "description": (description or f"{name} (from {server.name})")[:MAX_DESCRIPTION],
            "parameters": schema or {"type": "object", "properties": {}}}}

    def offered(self, scope: TurnScope) -> bool:
        return True

    async def run(self, scope: TurnScope, arguments: dict[str, Any]) -> str | Outcome:
        async def call() -> Any:
            async with connected(self.server) as client:
                return await client.call_tool(self.name, arguments)
        try:
            answer = await self.outside.within(TIMEOUT_S, call)
        except Exception as failure:  # a server down, slow or broken: the model reads that it failed
            log.warning("MCP server %s: %s failed (%s)", self.server.name, self.name, _reason(failure))
            return result(error=f"{self.name} did not answer; say so, do not make its answer up")
        text = "\n".join(getattr(part, "text", "") for part in answer.content if getattr(part, "text", ""))[:MAX_TEXT]
        shown = f"🧰 {self.server.name}: {self.name}"
        if answer.is_error:
            return Outcome(result(error=text or f"{self.name} failed"), shown=shown)
        return Outcome(text or "(no text in the answer)", shown=shown)


async def discover(servers: Sequence[MCPServerConfig], outside: Outside, again: bool = False
                   ) -> tuple[list[MCPTool], list[MCPServerConfig]]:
    """The named tools of every server that answers now, and the servers that do not; one
    WARNING for each that does not (at start-up; asked `again`, a DEBUG line), for each named tool
    a server does not have, and for each whose schema is too large."""
    tools: list[MCPTool] = []
    silent: list[MCPServerConfig] = []
    for server in servers:
        async def listed_tools() -> Any:
            async with connected(server) as client:
                return (await client.list_tools()).tools
        try:
            listed = await outside.within(START_TIMEOUT_S, listed_tools)
        except Exception as failure:
            where = server.url or " ".join(server.command)
            log.log(logging.DEBUG if again else logging.WARNING,
                    "MCP server %s (%s) did not answer%s (%s); its tools are offered once it does (asked again "
                    "every %d s)", server.name, where, "" if again else " at start-up", _reason(failure), ASK_AGAIN_S)
            silent.append(server)
            continue
        by_name = {tool.name: tool for tool in listed}
        for name in server.tools:
            if name not in by_name:
                log.warning("MCP server %s has no tool named %r (it has: %s)", server.name, name,
                            ", ".join(sorted(by_name))[:500] or "none")
                continue
            tool = by_name[name]
            schema = dict(tool.input_schema or {})
            if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
                log.warning("MCP server %s: the input schema of %r is over %d characters, and would go into every "
                            "model request; it is left out", server.name, name, MAX_SCHEMA_CHARS)
                continue
            tools.append(MCPTool(server, name, tool.description or "", schema, outside))
    return tools, silent


class LateServers:
    """MCP servers that did not answer at start-up, asked again in the background (`ask_again`,
    every ASK_AGAIN_S) until they do; their tools then join the toolbox (`join`), named like no
    other tool."""

    every_s = ASK_AGAIN_S

    def __init__(self, servers: Sequence[MCPServerConfig], outside: Outside, taken: set[str],
                 join: Callable[[list[MCPTool]], None]):
        self.servers = list(servers)
        self.outside = outside
        self.taken = set(taken)  # the names of the tools there are: a late tool never shadows one
        self.join = join  # where their tools go (Toolbox.add)

    async def ask_again(self) -> None:
        for server in list(self.servers):
            found, silent = await discover((server,), self.outside, again=True)
            if silent:
                continue
            self.servers.remove(server)
            tools = [tool for tool in found if tool.name not in self.taken]
            self.taken.update(tool.name for tool in tools)
            self.join(tools)
            log.info("MCP server %s answers now: its tools are offered (%s)", server.name,
                     ", ".join(tool.name for tool in tools) or "none of those named")
