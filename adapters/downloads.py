"""A platform's file read as a stream, up to a cap (SPEC 9: untrusted input has a budget; a
150 MB text file is never downloaded whole to keep its first 512 KB)."""

from __future__ import annotations

from pathlib import Path

import aiohttp

CHUNK_BYTES = 64 * 1024


class DownloadFailed(Exception):
    """The file could not be fetched. Its text never holds the address (a Telegram file URL
    holds the bot token)."""


async def read_capped(location: str, limit: int) -> bytes:
    """The first `limit` bytes of the file at `location` (an http(s) URL, or a local path as a
    local Telegram Bot API server gives), read chunk by chunk."""
    if not location.startswith(("http://", "https://")):
        with Path(location).open("rb") as local:
            return local.read(limit)
    try:
        async with aiohttp.ClientSession() as session, session.get(location) as response:
            if response.status != 200:
                raise DownloadFailed(f"the platform answered HTTP {response.status}")
            chunks, size = [], 0
            async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                chunks.append(chunk[: limit - size])
                size += len(chunks[-1])
                if size >= limit:
                    break  # leaving the block closes the connection: the rest is never read
            return b"".join(chunks)
    except aiohttp.ClientError as problem:
        raise DownloadFailed(f"the download failed ({type(problem).__name__})") from None
