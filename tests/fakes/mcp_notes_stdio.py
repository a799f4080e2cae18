"""The harbour-notes MCP server (tests/fakes/mcp_notes.py's tools) over stdin/stdout, as an owner's
`[[tools.mcp]] command` starts it: `python -m tests.fakes.mcp_notes_stdio`."""

from mcp.server.mcpserver import MCPServer

from tests.fakes.mcp_notes import NOTES

server = MCPServer("harbour-notes")


@server.tool()
def lookup(topic: str) -> str:
    """Look up the harbour notes on a topic (ferry, tide)."""
    return NOTES.get(topic.strip().lower(), f"No notes on {topic}.")


if __name__ == "__main__":
    server.run("stdio")
