"""SPEC 9, untrusted input has a budget: a platform's file is read as a stream up to the cap, and
the rest is never fetched — measured at a local HTTP server by the bytes it got to send."""

import asyncio

from aiohttp import web

from adapters.downloads import read_capped

FILE_MB = 50


async def test_a_file_is_fetched_only_up_to_its_cap_and_the_rest_is_never_sent():
    sent = 0
    finished = asyncio.Event()

    async def huge_file(request: web.Request) -> web.StreamResponse:
        nonlocal sent
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.content_length = FILE_MB * 1024 * 1024
        await response.prepare(request)
        chunk = b"x" * (64 * 1024)
        try:
            for _ in range(FILE_MB * 16):
                await response.write(chunk)
                sent += len(chunk)
        except (ConnectionError, asyncio.CancelledError):
            pass  # the reader hung up
        finally:
            finished.set()
        return response

    app = web.Application()
    app.router.add_get("/file.txt", huge_file)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        data = await read_capped(f"http://127.0.0.1:{port}/file.txt", 512 * 1024)
        await asyncio.wait_for(finished.wait(), 30)
    finally:
        await runner.cleanup()
    assert len(data) == 512 * 1024
    assert sent < 16 * 1024 * 1024  # of 50 MB: what the socket buffers held when the reader hung up
