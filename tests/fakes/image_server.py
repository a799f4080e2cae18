"""An image server on 127.0.0.1 in both shapes SPEC 20 names: OpenAI's `/v1/images/generations`
(`b64_json`) and automatic1111's `/sdapi/v1/txt2img` (`images`). It answers a real PNG drawn here
with Pillow (a lighthouse in two colours), or what a test asks for: `answer = "big"` (30 MB),
"bomb" (a PNG whose header promises 6,400×6,400 pixels), "html", "500", "hang". Records every
request body."""

from __future__ import annotations

import asyncio
import base64
import io

from aiohttp import web
from PIL import Image, ImageDraw

from tests.test_untrusted_input_end_to_end import png_of_side


def lighthouse_png() -> bytes:
    image = Image.new("RGB", (256, 256), (20, 30, 70))
    draw = ImageDraw.Draw(image)
    draw.rectangle((112, 80, 144, 230), fill=(235, 235, 235))
    draw.polygon([(104, 80), (152, 80), (128, 50)], fill=(200, 40, 40))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


class FakeImageServer:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict]] = []
        self.answer = "png"
        self.runner: web.AppRunner | None = None
        self.base_url = ""
        self.png = lighthouse_png()

    def _image(self) -> bytes | None:
        if self.answer == "big":
            return b"\x89PNG\r\n\x1a\n" + bytes(30 * 1024 * 1024)
        if self.answer == "bomb":
            return png_of_side(6_400)
        if self.answer == "not an image":
            return b"%PDF-1.4\n% this is a document, not a picture\n" * 20
        if self.answer == "cut short":  # a real PNG's header, its pixels cut off
            return self.png[:len(self.png) // 3]
        return self.png

    async def _answer(self, request: web.Request, shape: str) -> web.Response:
        self.requests.append((shape, await request.json()))
        if self.answer == "hang":  # longer than the test's timeout, short enough to stop the server after
            await asyncio.sleep(3)
        if self.answer == "500":
            return web.json_response({"error": "out of memory"}, status=500)
        if self.answer == "html":
            return web.Response(text="<html><body>502 Bad Gateway</body></html>", content_type="text/html")
        encoded = base64.b64encode(self._image()).decode()
        if shape == "openai":
            return web.json_response({"created": 0, "data": [{"b64_json": encoded}]})
        return web.json_response({"images": [encoded], "parameters": {}, "info": "{}"})

    async def start(self) -> None:
        app = web.Application(client_max_size=1024 ** 2)
        async def openai(request: web.Request) -> web.Response:
            return await self._answer(request, "openai")

        async def automatic1111(request: web.Request) -> web.Response:
            return await self._answer(request, "automatic1111")
        app.router.add_post("/v1/images/generations", openai)
        app.router.add_post("/sdapi/v1/txt2img", automatic1111)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
