"""Fakes of other people's servers, each over its real protocol on 127.0.0.1."""

from aiohttp import web


async def on_loopback(app: web.Application) -> tuple[web.AppRunner, int]:
    """`app` served on 127.0.0.1 at a free port: its runner (to clean up) and the port."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]
