"""Safe egress (SPEC 18): an address the model chose reaches only the public internet.

`Egress` is the guard of such an address, asked before every connection (bot/tools/outside.py
follows its redirects and connects where it says):
- only http and https, no credentials in the address, no host of `deny_domains`;
- the name is resolved once (numeric forms such as `0x7f.1` or `2130706433` read as the address
  they spell), and every address it gives must be public (`is_public`): not in any range of the
  IANA special-purpose registries, nor an IPv4-mapped, IPv4-compatible, NAT64, 6to4 or Teredo
  form of one — judged from the table below, on every Python version, not by the standard
  library's classification of the day;
- the connection goes to the address checked (the name rides in the Host header and TLS's SNI,
  and the certificate is checked against the name), so a second lookup cannot send it elsewhere;
- each redirect (at most MAX_REDIRECTS) is checked the same way;
- at most `max_bytes` (decoded) are read, and all of it within TIMEOUT_S.
Owner-configured addresses (SearXNG, MCP servers) do not come through here: they may be local.

The resolver is given (`resolve`); tests map their own names with it, and `dial` (the address a
checked one is reached at) lets a test's public address be served on loopback — no test traffic
leaves the machine, and the guard refuses before connecting.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Awaitable, Callable
from urllib.parse import urlsplit

from bot.tools.outside import MAX_REDIRECTS, Answer, Limits, Outside, OutsideFailed

TIMEOUT_S = 10.0
USER_AGENT = "Keepsake (a character chat bot reading a page a person linked)"
__all__ = ["MAX_REDIRECTS", "Egress", "EgressRefused", "is_public"]

# Not the public internet: every range of the IANA IPv4 and IPv6 special-purpose address
# registries (whatever their "globally reachable" column says: a character reads pages, not
# anycast services), and the ranges that are no unicast address at all.
NOT_PUBLIC_V4 = tuple(ipaddress.ip_network(net) for net in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24", "192.88.99.0/24",
    "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
    "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32"))
NOT_PUBLIC_V6 = tuple(ipaddress.ip_network(net) for net in (
    "::/128", "::1/128", "64:ff9b:1::/48", "100::/64", "100:0:0:1::/64", "2001::/23", "2001:db8::/32",
    "2620:4f:8000::/48", "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8"))
GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")  # every other IPv6 address is no public host
# Forms that carry an IPv4 address in their low 32 bits: the address carried is what is judged.
CARRIES_V4 = tuple(ipaddress.ip_network(net) for net in ("::ffff:0:0/96", "::/96", "64:ff9b::/96"))
SIX_TO_FOUR = ipaddress.ip_network("2002::/16")

Resolve = Callable[[str, int], Awaitable[list[str]]]  # a name and port → the addresses it gives
Dial = Callable[[str, int], tuple[str, int]]  # a checked address → where it is reached


class EgressRefused(OutsideFailed):
    """The address may not be opened; the message says why, in words the model can pass on."""


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
    """Whether an address is a host on the public internet (SPEC 18 "The egress guard knows
    every disguise"): an IPv4 address outside NOT_PUBLIC_V4; an IPv6 global unicast address
    outside NOT_PUBLIC_V6; and an IPv6 form that carries an IPv4 address (mapped, compatible,
    NAT64's well-known prefix, 6to4) only when the address it carries is. Teredo (2001::/32) and
    NAT64's local-use prefix (64:ff9b:1::/48, the address at any RFC 6052 position) are refused
    whole."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv4Address):
        return not any(ip in network for network in NOT_PUBLIC_V4)
    if ip.scope_id:
        return False
    if any(ip in network for network in CARRIES_V4):
        return is_public(str(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)))
    if ip in SIX_TO_FOUR:
        return is_public(str(ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)))
    return ip in GLOBAL_UNICAST_V6 and not any(ip in network for network in NOT_PUBLIC_V6)


class Egress:
    """The guard of addresses the model chose, and `fetch`, which reads one through the process's
    outside client (bot/tools/outside.py) within TIMEOUT_S and `max_bytes`."""

    def __init__(self, max_bytes: int, deny_domains: tuple[str, ...] = (), resolve: Resolve = system_resolve,
                 dial: Dial = lambda address, port: (address, port), outside: Outside | None = None):
        self.max_bytes = max_bytes
        self.deny_domains = tuple(domain.lower().strip(".") for domain in deny_domains)
        self.resolve = resolve
        self.dial = dial
        self.outside = outside or Outside()

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

    async def fetch(self, url: str) -> Answer:
        """The page at `url` (its first `max_bytes`, `cut` when it went on), every hop checked;
        OutsideFailed (EgressRefused for an address refused) saying why not."""
        return await self.outside.call("GET", url, Limits(TIMEOUT_S, self.max_bytes, cut=True), guard=self,
                                       headers={"User-Agent": USER_AGENT, "Accept": "text/html, text/plain;q=0.9"})
