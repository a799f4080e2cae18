"""SPEC 18 "Safe egress": an address the model chose reaches only the public internet. Every
attack is refused before any connection: the resolver handed to the guard maps the test names
and counts its lookups, and `dial` maps the one public test address to a page on loopback, so
no test sends traffic past this machine."""

import asyncio

import pytest

from bot.tools.egress import Egress, EgressRefused, is_public
from bot.tools.outside import OutsideFailed
from tests.fakes.web_pages import PUBLIC, FakeWeb, Names


@pytest.fixture
async def site():
    """Pages on loopback, reached as PUBLIC through `dial`; the paths it was asked for."""
    fake = FakeWeb()
    fake.page("/page", "<html><body><p>The tide turns at six.</p></body></html>")
    fake.redirect("/to-private", "http://10.0.0.7/admin")
    fake.redirect("/loop", "/loop")
    for hop in range(1, 6):  # /hop1 → … → /hop5 → /page: 5 redirects
        fake.redirect(f"/hop{hop}", f"/hop{hop + 1}" if hop < 5 else "/page")
    fake.megabytes("/huge", 50)
    await fake.start()
    yield fake.got, fake.dial
    await fake.stop()


def guard(names: Names, dial=lambda address, port: (address, port), max_bytes: int = 2_000_000) -> Egress:
    return Egress(max_bytes, deny_domains=("blocked.example",), resolve=names, dial=dial)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/", "http://169.254.169.254/latest/meta-data/", "http://[::1]/", "http://0x7f.1/",
    "http://[::ffff:127.0.0.1]/", "http://2130706433/", "http://0177.0.0.1/", "http://10.1.2.3/",
    "http://100.64.0.1/", "http://[fe80::1]/", "http://[64:ff9b::a9fe:a9fe]/", "http://[2002:7f00:1::]/",
    "http://224.0.0.1/", "http://0.0.0.0/", "http://[::]/",
])
async def test_read_refuses_every_form_of_a_local_or_private_address_before_connecting(url, site):
    got, dial = site
    names = Names()
    with pytest.raises(EgressRefused, match="not on the public internet"):
        await guard(names, dial).fetch(url)
    assert names.lookups == [] and got == []  # a numeric host is read as the address it spells, never looked up


async def test_a_public_name_that_resolves_to_a_private_address_is_refused(site):
    got, dial = site
    names = Names(intranet_example=[["93.184.215.14", "192.168.1.10"]])  # one of its addresses is private
    with pytest.raises(EgressRefused, match="not on the public internet"):
        await guard(names, dial).fetch("http://intranet.example/page")
    assert got == []


async def test_a_redirect_from_a_public_address_to_a_private_one_is_refused(site):
    got, dial = site
    names = Names(news_example=[[PUBLIC]])
    with pytest.raises(EgressRefused, match="10.0.0.7 is not on the public internet"):
        await guard(names, dial).fetch("http://news.example/to-private")
    assert got == ["/to-private"]  # the public page answered; the private one was never reached


async def test_a_name_that_resolves_differently_the_second_time_is_reached_at_the_address_checked(site):
    got, dial = site
    names = Names(news_example=[[PUBLIC], ["127.0.0.1"]])  # DNS rebinding: public first, loopback after
    page = await guard(names, dial).fetch("http://news.example/page")
    assert b"The tide turns at six." in page.body
    assert names.lookups == ["news.example"]  # resolved once; the connection went to what was checked
    assert got == ["/page"]


async def test_more_than_5_redirects_are_refused(site):
    got, dial = site
    with pytest.raises(OutsideFailed, match="more than 5 redirects"):
        await guard(Names(news_example=[[PUBLIC]]), dial).fetch("http://news.example/loop")
    assert len(got) == 5 + 1  # the first address and its 5 redirects, each checked: the 6th is not followed


async def test_5_redirects_are_followed(site):
    got, dial = site
    page = await guard(Names(news_example=[[PUBLIC]]), dial).fetch("http://news.example/hop1")
    assert b"The tide turns at six." in page.body and len(got) == 1 + 5


@pytest.mark.parametrize("url, why", [
    ("file:///etc/passwd", "only http and https"), ("ftp://news.example/", "only http and https"),
    ("gopher://news.example/", "only http and https"), ("http://ann:secret@news.example/", "user name or password"),
    ("http://shop.blocked.example/", "owner's list"),
])
async def test_only_http_and_https_without_credentials_outside_the_denied_domains(url, why, site):
    got, dial = site
    names = Names(news_example=[[PUBLIC]], shop_blocked_example=[[PUBLIC]])
    with pytest.raises(EgressRefused, match=why):
        await guard(names, dial).fetch(url)
    assert got == [] and names.lookups == []


async def test_a_50_mb_page_is_cut_at_max_bytes(site):
    got, dial = site
    page = await guard(Names(news_example=[[PUBLIC]]), dial, max_bytes=2_000_000).fetch("http://news.example/huge")
    assert len(page.body) == 2_000_000 and page.cut


def test_public_addresses_pass_the_check():
    assert is_public(PUBLIC) and is_public("2606:4700:4700::1111") and is_public("1.1.1.1")
    assert not is_public("::ffff:10.0.0.1") and not is_public("64:ff9b::7f00:1")


async def test_a_page_that_never_answers_is_given_up_within_10_seconds(monkeypatch, site):
    import bot.tools.egress as egress

    monkeypatch.setattr(egress, "TIMEOUT_S", 0.5)
    hanging = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
    port = hanging.sockets[0].getsockname()[1]
    async with hanging:
        with pytest.raises(OutsideFailed, match="no whole answer came within 0 s"):
            await guard(Names(slow_example=[[PUBLIC]]), lambda address, at: ("127.0.0.1", port)).fetch(
                "http://slow.example/")


@pytest.mark.timeout(30)
async def test_a_page_that_never_answers_is_given_up_at_10_seconds_exactly_as_the_spec_says():
    """The deadline itself, unpatched: about 10 s of a test's time, spent once."""
    hanging = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
    port = hanging.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    async with hanging:
        began = loop.time()
        with pytest.raises(OutsideFailed, match="no whole answer came within 10 s"):
            await asyncio.wait_for(guard(Names(slow_example=[[PUBLIC]]), lambda address, at: ("127.0.0.1", port)).fetch(
                "http://slow.example/"), 12)
    assert 9.5 <= loop.time() - began < 11
