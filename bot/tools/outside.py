"""One boundary to the outside (SPEC 18 "Every outside call is bounded the same way"): every call
a tool makes to a server someone else runs — a page `read` opens, the owner's SearXNG, the image
server, an MCP server over HTTP — goes through one `Outside` client, built once a process, so its
limits hold where nobody remembered to set them:

- **a total deadline per call** (`Limits.deadline_s`): the whole call, from the name's lookup to
  the last byte, never a per-read timeout that a server dripping a byte at a time can stretch;
- **a cap on the decoded bytes** (`Limits.max_bytes`), whatever the number of `Content-Encoding`
  layers: bodies are decoded here, a piece at a time, each layer bounded (`BoundedBody`), so
  1,827 bytes of `gzip, gzip` never become a gigabyte in memory. Past the cap an answer that must
  be whole fails; a page (`Limits.cut`) keeps its first `max_bytes`;
- **abandoned on stop**: every call runs in the process's `InFlight` (bot/in_flight.py); a stop
  cancels them all at once (`Abandoned`), so a hanging server never holds up an exit.

An address the model chose (`read`) is checked by the egress guard (bot/tools/egress.py) before
every connection, redirects included; owner-configured servers (SearXNG, the image server, MCP)
may be local, and their redirects are not followed. MCP's SDK makes its own requests (with
`httpx2`): `bounded_transport` gives it the same decoding and cap.

Whatever comes back is outside text to the toolbox, failures included: `OutsideFailed`'s words may
quote what a server sent (a content type, a status line), and are fenced like a page.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import zlib
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, Protocol, TypeVar
from urllib.parse import urljoin, urlsplit

import certifi
import httpx

from bot.in_flight import InFlight

MAX_REDIRECTS = 5  # of an address the model chose (SPEC 18): the 6th is refused
PIECE = 64 * 1024  # the most one layer of decoding turns out at a time
MOST_AT_ONCE = 32  # outside calls in flight in one process; the others wait, holding nothing
WBITS = {"gzip": zlib.MAX_WBITS | 16, "x-gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}
ACCEPT_ENCODING = "gzip, deflate"
T = TypeVar("T")


class OutsideFailed(Exception):
    """An outside call gave no usable answer; the message says why in a few words (outside text:
    it may quote what the server sent)."""


class TooLarge(OutsideFailed):
    """The answer went on past `max_bytes` (decoded) where it must be whole."""


class TooSlow(OutsideFailed):
    """No whole answer came within the call's deadline."""


class Answered(OutsideFailed):
    """The server answered with an error status (or, unasked, a redirect)."""

    def __init__(self, status: int):
        super().__init__(f"it answered HTTP {status}")
        self.status = status


@dataclass(frozen=True)
class Limits:
    deadline_s: float  # the whole call, every hop and byte
    max_bytes: int  # of the decoded body
    cut: bool = False  # past max_bytes keep the first max_bytes (a page), instead of failing


DEFAULT_LIMITS = Limits(10.0, 1_000_000)  # a call that names none: 10 s in all, 1 MB decoded


@dataclass(frozen=True)
class Answer:
    url: str  # where the answer came from, after redirects
    status: int
    content_type: str
    body: bytes  # decoded, at most Limits.max_bytes
    cut: bool  # the body went on past max_bytes (Limits.cut)


class Guard(Protocol):
    """The egress guard of an address the model chose (bot/tools/egress.py)."""

    async def checked(self, url: str) -> tuple[str, int, str]:
        """(host, port, the one checked address to connect to), or EgressRefused."""

    def dial(self, address: str, port: int) -> tuple[str, int]:
        """Where a checked address is reached (a test serves its public address on loopback)."""


@functools.cache
def certificates() -> ssl.SSLContext:
    """The TLS context outside calls verify with (the CA bundle httpx uses), made once a process:
    a TLS context costs milliseconds to build."""
    return ssl.create_default_context(cafile=certifi.where())


def decoders_for(content_encoding: str) -> list[Any]:
    """One zlib decoder a layer, in the order to undo them (the last applied first)."""
    layers = [name.strip().lower() for name in content_encoding.split(",")]
    layers = [name for name in layers if name and name != "identity"]
    for name in layers:
        if name not in WBITS:
            raise OutsideFailed(f"the answer came in an encoding that is not read ({name[:40]})")
    return [zlib.decompressobj(WBITS[name]) for name in reversed(layers)]


def _through(decoders: list[Any], data: bytes, depth: int = 0) -> Iterator[bytes]:
    """`data` through the layers from `depth` on, a bounded piece at a time."""
    if depth == len(decoders):
        if data:
            yield data
        return
    decoder = decoders[depth]
    while not decoder.eof:
        try:
            out = decoder.decompress(data, PIECE)
        except zlib.error:
            raise OutsideFailed("the answer's compressed body is broken") from None
        data = decoder.unconsumed_tail
        yield from _through(decoders, out, depth + 1)
        if not data and len(out) < PIECE:
            break


class BoundedBody:
    """An answer's raw bytes, decoded layer by layer and counted as they come: at most
    `max_bytes` decoded (and as many raw) are ever held."""

    def __init__(self, content_encoding: str, limits: Limits):
        self.decoders = decoders_for(content_encoding)
        self.limits = limits
        self.raw = 0
        self.decoded = 0
        self.cut = False

    def pieces(self, raw: bytes) -> Iterator[bytes]:
        """What `raw` decodes to; OutsideFailed (or, with Limits.cut, `cut` set and the last
        piece trimmed) once the decoded or raw bytes pass max_bytes."""
        self.raw += len(raw)
        for piece in _through(self.decoders, raw):
            room = self.limits.max_bytes - self.decoded
            if len(piece) > room:
                self._past_the_cap()
                piece = piece[:room]
            self.decoded += len(piece)
            yield piece
            if self.cut:
                return
        if self.raw > self.limits.max_bytes and not self.cut:
            self._past_the_cap()

    def _past_the_cap(self) -> None:
        if not self.limits.cut:
            raise TooLarge(f"the answer was larger than {self.limits.max_bytes:,} bytes")
        self.cut = True


async def read_bounded(raw: AsyncIterator[bytes], content_encoding: str, limits: Limits) -> tuple[bytes, bool]:
    """A whole body from its raw stream, decoded and capped: (body, cut)."""
    body = BoundedBody(content_encoding, limits)
    kept = bytearray()
    async for chunk in raw:
        for piece in body.pieces(chunk):
            kept += piece
        if body.cut:
            break
    return bytes(kept), body.cut


class Outside:
    """The one client of every outside call in a process."""

    def __init__(self, most_at_once: int = MOST_AT_ONCE):
        self.in_flight = InFlight(most_at_once)
        self.tls = certificates()

    def abandon(self) -> None:
        """Stopping: every outside call in flight is given up at once (`Abandoned`), none starts."""
        self.in_flight.abandon()

    async def within(self, deadline_s: float, work: Callable[[], Awaitable[T]]) -> T:
        """`work()` as an outside call: in flight (abandoned on stop: `Abandoned`) and given
        `deadline_s` in all (TooSlow past it). For a library that makes its own requests (MCP's
        SDK, with `bounded_transport`); `call` is this for a plain HTTP request."""
        async def within_the_deadline() -> T:
            try:
                async with asyncio.timeout(deadline_s):
                    return await work()
            except TimeoutError:
                raise TooSlow(f"no whole answer came within {deadline_s:.0f} s") from None
        return await self.in_flight.run(within_the_deadline)

    async def call(self, method: str, url: str, limits: Limits = DEFAULT_LIMITS, *, json: Any = None,
                   headers: dict[str, str] | None = None, guard: Guard | None = None) -> Answer:
        """One call within `limits`: the answer, OutsideFailed saying why not, or Abandoned when
        the process stops first. With `guard` (an address the model chose) every hop is checked
        and up to MAX_REDIRECTS redirects are followed; without, none is."""
        async def request() -> Answer:
            try:
                return await self._call(method, url, limits, json, headers or {}, guard)
            except httpx.HTTPError as failure:
                raise OutsideFailed(f"it could not be reached ({type(failure).__name__})") from None
        return await self.within(limits.deadline_s, request)

    async def _call(self, method: str, url: str, limits: Limits, json: Any, headers: dict[str, str],
                    guard: Guard | None) -> Answer:
        async with httpx.AsyncClient(follow_redirects=False, trust_env=False, timeout=limits.deadline_s,
                                     verify=self.tls) as client:
            for _ in range(MAX_REDIRECTS + 1):
                request = await self._request(client, method, url, json, headers, guard)
                response = await client.send(request, stream=True)
                try:
                    if response.is_redirect and guard is not None:
                        url = urljoin(url, response.headers.get("location", ""))
                        continue
                    if response.status_code >= 300:
                        raise Answered(response.status_code)
                    body, cut = await read_bounded(response.aiter_raw(), response.headers.get("content-encoding", ""),
                                                   limits)
                    return Answer(url, response.status_code, response.headers.get("content-type", ""), body, cut)
                finally:
                    await response.aclose()
        raise OutsideFailed(f"more than {MAX_REDIRECTS} redirects")

    @staticmethod
    async def _request(client: httpx.AsyncClient, method: str, url: str, json: Any, headers: dict[str, str],
                       guard: Guard | None) -> httpx.Request:
        headers = {**headers, "Accept-Encoding": ACCEPT_ENCODING}
        if guard is None:
            return client.build_request(method, url, json=json, headers=headers)
        host, port, address = await guard.checked(url)  # the connection goes to the address checked
        parts = urlsplit(url)
        reach, reach_port = guard.dial(address, port)
        at = f"[{reach}]" if ":" in reach else reach
        target = parts._replace(netloc=f"{at}:{reach_port}").geturl()
        return client.build_request(method, target, json=json, headers={**headers, "Host": parts.netloc.rpartition("@")[2]},
                                    extensions={"sni_hostname": host} if parts.scheme == "https" else {})


def bounded_transport(http: Any, inner: Any, max_bytes: int) -> Any:
    """A transport of the HTTP library `http` (httpx, or MCP's httpx2) around `inner` whose
    answers are decoded here and capped at `max_bytes` decoded bytes, whatever their layers
    (they reach the library with no `Content-Encoding` left to undo)."""

    class Decoded(http.AsyncByteStream):
        def __init__(self, response: Any):
            self.response = response
            self.body = BoundedBody(response.headers.get("content-encoding", ""), Limits(0, max_bytes))

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self.response.stream:
                for piece in self.body.pieces(chunk):
                    yield piece

        async def aclose(self) -> None:
            await self.response.aclose()

    class Bounded(http.AsyncBaseTransport):
        async def handle_async_request(self, request: Any) -> Any:
            request.headers["Accept-Encoding"] = ACCEPT_ENCODING
            response = await inner.handle_async_request(request)
            try:
                stream = Decoded(response)
            except OutsideFailed:
                await response.aclose()
                raise
            headers = [(k, v) for k, v in response.headers.multi_items()
                       if k.lower() not in ("content-encoding", "content-length")]
            return http.Response(response.status_code, headers=headers, stream=stream,
                                 extensions=response.extensions, request=request)

        async def aclose(self) -> None:
            await inner.aclose()

    return Bounded()
