"""A real MCP server made with the official `mcp` SDK, served over streamable HTTP on
127.0.0.1 by uvicorn: a harbour-notes server with a `lookup` tool (offered when named) and a
`wipe` tool (never named in the tests' config, so never offered). Records every call."""

from __future__ import annotations

import asyncio
import socket

import uvicorn
from mcp.server.mcpserver import MCPServer

NOTES = {"ferry": "The ferry to Ouessant leaves at 09:30 from the Stiff pier.",
         "tide": "High tide at Brest today: 18:12, 6.9 m."}


class NotesServer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        server = MCPServer("harbour-notes")

        @server.tool()
        def lookup(topic: str) -> str:
            """Look up the harbour notes on a topic (ferry, tide)."""
            self.calls.append(("lookup", {"topic": topic}))
            return NOTES.get(topic.strip().lower(), f"No notes on {topic}.")

        @server.tool()
        def wipe() -> str:
            """Erase every note."""
            self.calls.append(("wipe", {}))
            return "wiped"

        self.app = server.streamable_http_app(stateless_http=True, json_response=True)
        self.server: uvicorn.Server | None = None
        self.task: asyncio.Task | None = None
        self.url = ""

    async def start(self, port: int = 0) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        port = listener.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="on"))
        self.task = asyncio.create_task(self.server.serve(sockets=[listener]))
        while not self.server.started:
            await asyncio.sleep(0.02)
        self.url = f"http://127.0.0.1:{port}/mcp"

    async def stop(self) -> None:
        if self.server is not None and self.task is not None:
            self.server.should_exit = True
            await asyncio.wait_for(self.task, 10)
