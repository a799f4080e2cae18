"""Safe egress (SPEC 18): an address the model chose reaches only the public internet.

`Egress.fetch(url)`:
- only http and https, no credentials in the address, no host of `deny_domains`;
- the name is resolved once (numeric forms such as `0x7f.1` or `2130706433` read as the address
  they spell), and every address it gives must be public: no loopback, private, link-local,
  shared (100.64/10), multicast, reserved or unspecified address, nor an IPv4-mapped, NAT64 or
  6to4 form of one;
- the connection goes to the address checked (the name rides in the Host header and TLS's SNI,
  and the certificate is checked against the name), so a second lookup cannot send it elsewhere;
- each redirect (at most MAX_REDIRECTS) is checked the same way;
- at most `max_bytes` are read, and all of it within TIMEOUT_S.
Owner-configured addresses (SearXNG, MCP servers) do not come through here: they may be local.

The resolver is given (`resolve`); tests map their own names with it, and `dial` (the address a
checked one is reached at) lets a test's public address be served on loopback — no test traffic
leaves the machine, and the guard refuses before connecting.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from typing import Awaitable, Callable
from urllib.parse import urljoin, urlsplit

import certifi
import httpx

MAX_REDIRECTS = 5
TIMEOUT_S = 10.0
USER_AGENT = "Keepsake (a character chat bot reading a page a person linked)"
NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
SHARED = ipaddress.ip_network("100.64.0.0/10")

Resolve = Callable[[str, int], Awaitable[list[str]]]  # a name and port → the addresses it gives
Dial = Callable[[str, int], tuple[str, int]]  # a checked address → where it is reached


class EgressRefused(Exception):
    """The address may not be opened; the message says why, in words the model can pass on."""


@dataclass(frozen=True)
class Fetched:
    url: str  # where the page was, after redirects
    content_type: str
    body: bytes
    cut: bool  # the page was longer than max_bytes


def certificates() -> ssl.SSLContext:
    """The TLS context the tools' requests verify with (the same CA bundle httpx uses)."""
    return ssl.create_default_context(cafile=certifi.where())


async def system_resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def numeric(host: str) -> str | None:
    """The address a numeric host spells in any form the system would read (`0x7f.1`,
    `2130706433`, `[::ffff:127.0.0.1]`), or None for a name."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return socket.inet_ntoa(socket.inet_aton(host))  # the forms inet_aton (and so a resolver) accepts
    except OSError:
        return None


def is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return is_public(str(ip.ipv4_mapped))
        if any(ip in network for network in NAT64):
            return is_public(str(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)))
        if ip.sixtofour is not None:
            return is_public(str(ip.sixtofour))
        if ip.teredo is not None:
            return False
    if ip in SHARED:
        return False
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_unspecified or ip.is_loopback
                                 or ip.is_link_local or ip.is_private)


class Egress:
    def __init__(self, max_bytes: int, deny_domains: tuple[str, ...] = (), resolve: Resolve = system_resolve,
                 dial: Dial = lambda address, port: (address, port)):
        self.max_bytes = max_bytes
        self.deny_domains = tuple(domain.lower().strip(".") for domain in deny_domains)
        self.resolve = resolve
        self.dial = dial
        self.tls = certificates()  # made once: a TLS context costs milliseconds to build

    async def checked(self, url: str) -> tuple[str, int, str]:
        """(host, port, the one public address to connect to), or EgressRefused saying why."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise EgressRefused("only http and https addresses can be read")
        if parts.username is not None or parts.password is not None:
            raise EgressRefused("an address with a user name or password in it is not read")
        host = (parts.hostname or "").lower().rstrip(".")
        if not host:
            raise EgressRefused("the address has no host")
        if any(host == domain or host.endswith("." + domain) for domain in self.deny_domains):
            raise EgressRefused(f"{host} is on the owner's list of domains not to read")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise EgressRefused("the address has a bad port") from None
        spelled = numeric(host)
        try:
            addresses = [spelled] if spelled is not None else await self.resolve(host, port)
        except OSError:
            raise EgressRefused(f"{host} could not be found") from None
        if not addresses:
            raise EgressRefused(f"{host} could not be found")
        if not all(is_public(address) for address in addresses):
            raise EgressRefused(f"{host} is not on the public internet; only public pages are read")
        return host, port, addresses[0]

    async def fetch(self, url: str) -> Fetched:
        try:
            async with asyncio.timeout(TIMEOUT_S):
                return await self._fetch(url)
        except TimeoutError:
            raise EgressRefused(f"the page did not arrive within {TIMEOUT_S:.0f} s") from None
        except httpx.HTTPError as failure:
            raise EgressRefused(f"the page could not be fetched ({type(failure).__name__})") from None

    async def _fetch(self, url: str) -> Fetched:
        async with httpx.AsyncClient(follow_redirects=False, trust_env=False, timeout=TIMEOUT_S,
                                     verify=self.tls) as client:
            for _ in range(MAX_REDIRECTS + 1):
                host, port, address = await self.checked(url)
                parts = urlsplit(url)
                reach, reach_port = self.dial(address, port)
                at = f"[{reach}]" if ":" in reach else reach
                target = parts._replace(netloc=f"{at}:{reach_port}").geturl()
                request = client.build_request(
                    "GET", target, headers={"Host": parts.netloc.rpartition("@")[2], "User-Agent": USER_AGENT,
                                            "Accept": "text/html, text/plain;q=0.9"},
                    extensions={"sni_hostname": host} if parts.scheme == "https" else {})
                response = await client.send(request, stream=True)
                try:
                    if response.is_redirect:
                        location = response.headers.get("location", "")
                        url = urljoin(url, location)
                        continue
                    if response.status_code >= 400:
                        raise EgressRefused(f"the page answered {response.status_code}")
                    body, cut = bytearray(), False
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > self.max_bytes:
                            del body[self.max_bytes:]
                            cut = True
                            break
                    return Fetched(url, response.headers.get("content-type", ""), bytes(body), cut)
                finally:
                    await response.aclose()
        raise EgressRefused(f"more than {MAX_REDIRECTS} redirects")
