"""SPEC 21, the memory page, over real HTTP on loopback (aiohttp serving, an HTTP client asking):
the one-time link and its session, each attack of #53 refused, and every change going through
the `/memory` command's own rules. The browser test is tests/test_memory_page_browser.py."""

import asyncio
import contextlib
import json
import re
import time

import aiohttp
import pytest

from adapters.web import server
from adapters.web.server import COOKIE, PageServer, visitor
from bot.cli import page_server
from bot.config import WebConfig, parse_config
from bot.access.door import digest
from bot.runtime import build_runtime
from tests.conftest import Chat, config_dict
from tests.test_people import link

TEN_MINUTES = 600
FORM_TOKEN = re.compile(r'name="csrf" value="([^"]+)"')


def web_config(llm, tmp_path, storage_url: str | None = None, **web):
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    if storage_url:
        raw["storage"] = {"url": storage_url}
    raw["characters"].append({"name": "Aki", "persona": "You are Aki, a retired sailor."})
    raw["web"] = {"port": 8080, **web}
    raw["owner"] = {"ids": ["telegram:1"]}
    return parse_config(raw, base=tmp_path)


class Browser:
    """An HTTP client that keeps one cookie, as a browser would for this page."""

    def __init__(self, base: str, forwarded_for: str | None = None):
        self.base = base
        self.cookie: str | None = None
        self.http = aiohttp.ClientSession()
        self.forwarded_for = forwarded_for  # as a reverse proxy on this machine would send it

    async def request(self, method: str, path: str, data: dict | None = None, site: str = "same-origin"):
        """As a browser sends it: a form says where it was sent from (`Origin`, `Sec-Fetch-Site`);
        `site="cross-site"` sends it as a page of another site would."""
        headers = {"Cookie": f"{COOKIE}={self.cookie}"} if self.cookie else {}
        if method == "POST":
            headers |= {"Origin": self.base if site == "same-origin" else "https://mallory.example",
                        "Sec-Fetch-Site": site}
        if self.forwarded_for:
            headers["X-Forwarded-For"] = self.forwarded_for
        async with self.http.request(method, self.base + path, data=data, headers=headers,
                                     allow_redirects=False) as response:
            body = await response.read()
            cookie = response.cookies.get(COOKIE)
            if cookie is not None:
                self.cookie = cookie.value or None
            return response, body.decode("utf-8", "replace")

    async def open(self, link: str):
        """Open a link as a person would: the page, then its button (a POST of the code)."""
        code = link.rsplit("/open/", 1)[1]
        response, body = await self.request("GET", f"/open/{code}")
        assert response.status == 200 and 'action="/open"' in body
        return await self.request("POST", "/open", {"code": code})

    async def form_token(self) -> str:
        _, body = await self.request("GET", "/")
        return FORM_TOKEN.search(body).group(1)

    async def act(self, action: str, **fields):
        return await self.request("POST", f"/act/{action}", {"csrf": await self.form_token(), **fields})

    async def close(self):
        await self.http.close()


@contextlib.asynccontextmanager
async def serving(config, clock):
    """A bot runtime with this config and its page served on loopback: (runtime, a new browser)."""
    runtime = await build_runtime(config, clock=clock)
    server = page_server(config.web, runtime.core.page)
    stop = await server.start("127.0.0.1", 0)  # as a bot process serves it, its connection limits on
    browsers = []

    def browser(forwarded_for: str | None = None) -> Browser:
        browsers.append(Browser(f"http://127.0.0.1:{server.addresses[0][1]}", forwarded_for))
        return browsers[-1]

    try:
        yield runtime, browser
    finally:
        for each in browsers:
            await each.close()
        await stop()
        await runtime.close()


@pytest.fixture
async def web(llm, tmp_path, clock):
    async with serving(web_config(llm, tmp_path), clock) as served:
        yield served


async def link_for(chat: Chat) -> str:
    answer = await chat.memory("/memory page")
    assert answer.ok, answer.text
    return re.search(r"(https?://\S+/open/\S+)", answer.text).group(1)


async def signed_in(browser, chat: Chat) -> "Browser":
    """A new browser on the person's page, through the link `/memory page` gave them."""
    page = browser()
    await page.open(await link_for(chat))
    return page


async def test_memory_page_answers_with_a_link_to_the_configured_address(web):
    runtime, _ = web
    link = await link_for(Chat(runtime))
    assert link.startswith("http://127.0.0.1:8080/open/")
    assert len(link.rsplit("/", 1)[1]) >= 40  # 256 random bits, never guessed


async def test_without_web_the_command_says_there_is_no_page(runtime, ann):
    answer = await ann.memory("/memory page")
    assert not answer.ok and "[web]" in answer.text


async def test_the_web_section_binds_the_page_to_127_0_0_1_unless_configured():
    assert WebConfig().listen == "127.0.0.1"
    assert WebConfig(listen="0.0.0.0", port=9000).address == "http://127.0.0.1:9000"
    assert WebConfig(public_url="https://keepsake.example.com/").address == "https://keepsake.example.com"


async def test_the_page_server_listens_only_where_listen_says(web, unused_tcp_port):
    import asyncio
    runtime, _ = web
    server = PageServer(runtime.core.page, secure=False)
    stop = asyncio.Event()
    serving = asyncio.create_task(server.serve("127.0.0.1", unused_tcp_port, stop))
    try:
        for _ in range(100):
            if server.addresses:
                break
            await asyncio.sleep(0.02)
        assert [address[0] for address in server.addresses] == ["127.0.0.1"]
    finally:
        stop.set()
        await serving


async def test_a_link_opens_a_session_once_and_the_address_then_holds_no_secret(web):
    runtime, browser = web
    link = await link_for(Chat(runtime))
    first, second = browser(), browser()
    response, _ = await first.open(link)
    assert response.status == 303 and response.headers["Location"] == "/"
    response, body = await first.request("GET", "/")
    assert response.status == 200 and "What the characters remember about you" in body
    response, body = await second.open(link)  # the same link again
    assert response.status == 403 and "used already" in body and second.cookie is None


async def test_the_session_cookie_is_httponly_samesite_strict_and_lasts_12_hours(web):
    runtime, browser = web
    link = await link_for(Chat(runtime))
    response, _ = await browser().open(link)
    cookie = response.cookies[COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["max-age"] == str(12 * 3600)
    assert not cookie["secure"]  # plain http on loopback: a Secure cookie would never come back


async def test_the_session_cookie_is_secure_under_https(llm, tmp_path, clock):
    config = web_config(llm, tmp_path, public_url="https://keepsake.example.com")
    async with serving(config, clock) as (runtime, browser):
        link = await link_for(Chat(runtime))
        assert link.startswith("https://keepsake.example.com/open/")
        response, _ = await browser().open(link)
        assert response.cookies[COOKIE]["secure"]


async def test_a_link_after_10_minutes_is_refused(web, clock):
    runtime, browser = web
    link = await link_for(Chat(runtime))
    clock.now += TEN_MINUTES + 1
    response, body = await browser().open(link)
    assert response.status == 403 and "older than 10 minutes" in body


async def test_a_session_ends_after_12_hours(web, clock):
    runtime, browser = web
    ann = browser()
    await ann.open(await link_for(Chat(runtime)))
    clock.now += 12 * 3600 + 1
    response, body = await ann.request("GET", "/")
    assert response.status == 401 and "/memory page" in body


async def test_a_session_is_checked_in_the_database_on_every_request(web):
    """A session ended elsewhere (another process shares the database) ends here at once: nothing
    of it is kept in this process's memory."""
    runtime, browser = web
    page = await signed_in(browser, Chat(runtime))
    response, _ = await page.request("GET", "/")
    assert response.status == 200
    await runtime.store.pages.end_session(digest(page.cookie))  # as another process signing out would
    response, body = await page.request("GET", "/")
    assert response.status == 401 and "/memory page" in body


async def test_the_one_time_code_and_the_session_token_are_stored_only_hashed(web, tmp_path):
    runtime, browser = web
    link = await link_for(Chat(runtime))
    code = link.rsplit("/", 1)[1]
    assert [row["code_hash"] for row in await runtime.store.db.all("SELECT code_hash FROM page_links")] == [digest(code)]
    page = browser()
    await page.open(link)
    stored = b"".join(path.read_bytes() for path in tmp_path.glob("keepsake.sqlite3*"))
    assert code.encode() not in stored and page.cookie.encode() not in stored


async def test_a_forged_code_is_refused_and_5_wrong_codes_make_the_address_wait_but_a_valid_code_opens(web):
    runtime, browser = web
    mallory = browser()
    for n in range(5):
        response, body = await mallory.request("POST", "/open", {"code": f"guessed-code-number-{n:03d}-aaaaaaaa"})
        assert response.status == 403, n
    response, body = await mallory.request("POST", "/open", {"code": "guessed-code-number-006-aaaaaaaa"})
    assert response.status == 429 and "Wait 10 minutes" in body and mallory.cookie is None
    ann = browser()  # the same address: a valid code always opens (SPEC 21 "valid links always open")
    response, _ = await ann.open(await link_for(Chat(runtime)))
    assert response.status == 303 and ann.cookie


async def test_wrong_codes_count_for_10_minutes(web, clock):
    runtime, browser = web
    mallory = browser()
    for n in range(6):
        response, _ = await mallory.request("POST", "/open", {"code": f"guessed-code-number-{n:03d}-aaaaaaaa"})
    assert response.status == 429
    clock.now += TEN_MINUTES - 60  # 9 minutes on: the six still count
    response, _ = await mallory.request("POST", "/open", {"code": "guessed-code-number-007-aaaaaaaa"})
    assert response.status == 429
    clock.now += TEN_MINUTES + 1  # every one of them older than 10 minutes: a wrong code is one again
    response, body = await mallory.request("POST", "/open", {"code": "guessed-code-number-008-aaaaaaaa"})
    assert response.status == 403 and "used already" in body


async def test_behind_a_proxy_on_this_machine_wrong_codes_count_against_the_address_it_forwards_for(web):
    """Every visitor reaches the page from a reverse proxy on this machine (127.0.0.1): the 5
    wrong codes count against the address the proxy forwards for — the last of X-Forwarded-For,
    the one it adds — so Mallory's guesses make Mallory wait, not Ann, whatever Mallory writes."""
    runtime, browser = web
    for n in range(5):
        response, _ = await browser("203.0.113.5").request("POST", "/open", {"code": f"guess-{n:03d}-aaaaaaaaaaaa"})
        assert response.status == 403, n
    # Mallory's own X-Forwarded-For naming Ann's address comes first; the proxy adds hers after it
    response, body = await browser("198.51.100.7, 203.0.113.5").request("POST", "/open", {"code": "guess-x-aaaaaaaaaa"})
    assert response.status == 429 and "Wait 10 minutes" in body
    response, _ = await browser("198.51.100.7").request("POST", "/open", {"code": "ann-mistyped-aaaaaaaa"})
    assert response.status == 403  # Ann's own mistake counts against Ann only
    ann = browser("198.51.100.7")
    response, _ = await ann.open(await link_for(Chat(runtime)))
    assert response.status == 303 and ann.cookie


def test_only_a_trusted_proxy_is_believed_about_whom_it_forwards_for_across_every_header_line():
    proxies = ("127.0.0.1/32", "::1/128", "10.0.0.0/8")
    assert visitor("192.0.2.1", ["203.0.113.5"], proxies) == ("192.0.2.1", None)  # no proxy of ours
    assert visitor("127.0.0.1", ["203.0.113.5"], proxies) == ("203.0.113.5", "127.0.0.1")
    assert visitor("::1", ["not an address"], proxies) == ("::1", None) and visitor("127.0.0.1", [], proxies) == (
        "127.0.0.1", None)
    # HAProxy appends its own line; a second proxy of ours (10.0.0.2) added the visitor before it
    assert visitor("10.0.0.1", ["198.51.100.7, 203.0.113.5", "10.0.0.2"], proxies) == ("203.0.113.5", "10.0.0.1")


async def test_bobs_cookie_asking_for_anns_memory_gets_404_and_changes_nothing(web):
    runtime, browser = web
    ann, bob = Chat(runtime), Chat(runtime, user="bob", name="Bob", chat_id="dm-bob")
    added = await ann.memory("/memory add I am allergic to peanuts")
    memory_id = re.search(r"#(\d+)", added.text).group(1)
    bobs = await signed_in(browser, bob)
    mira = runtime.cast.character("Mira").id
    for action in ("pin", "delete", "edit"):
        response, body = await bobs.act(action, character=str(mira), id=memory_id, text="Bob was here")
        assert response.status == 404 and f"There is no memory #{memory_id}." in body, action
    response, body = await bobs.request("GET", "/")
    assert "peanuts" not in body
    view = await ann.memory("/memory view")
    assert "I am allergic to peanuts" in view.text and "📌" not in view.text


async def test_a_form_without_its_csrf_token_is_refused(web):
    runtime, browser = web
    ann = Chat(runtime)
    page = await signed_in(browser, ann)
    mira = runtime.cast.character("Mira").id
    for fields in ({}, {"csrf": "not-the-token"}):
        response, body = await page.request("POST", "/act/add", {"character": str(mira), "text": "forged", **fields})
        assert response.status == 403 and "did not come from your page" in body
    response, _ = await page.request("POST", "/forget", {"confirm": "yes"})
    assert response.status == 403
    assert "no saved memories" in (await ann.memory("/memory view")).text
    response, _ = await page.request("POST", "/leave", {})  # signing out is a form too: not from elsewhere
    assert response.status == 403
    response, _ = await page.request("GET", "/")
    assert response.status == 200  # still signed in


async def test_a_memory_text_with_a_script_is_shown_as_text(web):
    runtime, browser = web
    ann = Chat(runtime)
    await ann.memory("/memory add <script>alert(1)</script>")
    page = await signed_in(browser, ann)
    _, body = await page.request("GET", "/")
    assert "<script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body


async def test_every_answer_carries_a_strict_content_security_policy_and_no_referrer(web):
    runtime, browser = web
    page = browser()
    for method, path in (("GET", "/"), ("GET", "/open/x"), ("GET", "/owner"), ("GET", "/nowhere")):
        response, _ = await page.request(method, path)
        policy = dict(part.strip().split(" ", 1) for part in response.headers["Content-Security-Policy"].split(";"))
        assert policy["default-src"] == "'self'" and policy["frame-ancestors"] == "'none'", path
        assert {source for sources in policy.values() for source in sources.split()} <= {"'self'", "'none'"}
        assert response.headers["Referrer-Policy"] == "same-origin"  # never to another site
        assert response.headers["Cache-Control"] == "no-store"


async def test_a_flood_of_page_views_makes_one_page_at_a_time_and_leaves_the_bot_nine_tenths(web):
    """#67 item 4: 8 clients flooding `GET /` raised a turn's p50 from 15 ms to 800 ms, each
    page's queries queued on the bot's one database connection beside the turn's. A page is
    made while no other is, and the next waits 9× as long as it took (PAGE_SHARE, a
    tenth), so the bot has the rest (bench/page_flood.py measures the turn)."""
    runtime, browser = web
    ann = Chat(runtime, platform="telegram")
    pages = [await signed_in(browser, ann) for _ in range(8)]
    made, spans = runtime.core.page.person_page, []

    async def timed(visit):
        began = time.monotonic()
        try:
            return await made(visit)
        finally:
            spans.append((began, time.monotonic()))
    runtime.core.page.person_page = timed
    answers = await asyncio.gather(*(page.request("GET", "/") for page in pages for _ in range(2)))
    assert [response.status for response, _ in answers] == [200] * 16
    for (began, ended), (next_began, _) in zip(spans, spans[1:]):
        assert next_began - ended >= 9 * (ended - began) * 0.95  # never two at once, and the bot's share between


async def test_a_sessions_requests_are_bounded_and_past_the_bound_answered_429_after_a_second(web, monkeypatch):
    """SPEC 21 "requests per session bounded": at most 20 requests of a session begin in any 20 s
    (here 3 in any 60 s, to be quick); the next, a view or a form alike, is answered 429 after a
    second (a flood's client that waits for its answer asks once a second), saying when to come
    back, without waiting for another session's page being made."""
    monkeypatch.setattr(server, "SESSION_REQUESTS", 3)
    monkeypatch.setattr(server, "SESSION_WINDOW_S", 60.0)
    runtime, browser = web
    anns = await signed_in(browser, Chat(runtime, platform="telegram"))
    bobs = await signed_in(browser, Chat(runtime, platform="telegram", user="2", chat_id="2"))
    mira = str(runtime.cast.character("Mira").id)
    token = await anns.form_token()  # Ann's first request
    *ann, bob = await asyncio.gather(
        anns.request("GET", "/"), anns.request("POST", "/act/add", {"csrf": token, "character": mira, "text": "bees"}),
        anns.request("GET", "/"), bobs.request("GET", "/"))
    assert sorted(response.status for response, _ in ann) == [200, 200, 429]
    refused, body = next((response, body) for response, body in ann if response.status == 429)
    assert "Too many requests" in body and 0 < int(refused.headers["Retry-After"]) <= 60
    assert refused.headers["Content-Security-Policy"].startswith("default-src 'self'")
    assert bob[0].status == 200  # another session's page is made meanwhile
    made, entered, let_go = runtime.core.page.person_page, asyncio.Event(), asyncio.Event()

    async def held(visit):  # Bob's next page is being made until let go
        entered.set()
        await let_go.wait()
        return await made(visit)
    runtime.core.page.person_page = held
    bobs_next = asyncio.create_task(bobs.request("GET", "/"))
    await entered.wait()
    began = time.monotonic()
    response, _ = await asyncio.wait_for(anns.request("GET", "/"), 5)  # not after Bob's page
    assert response.status == 429 and time.monotonic() - began >= 1.0
    assert not bobs_next.done()
    let_go.set()
    assert (await bobs_next)[0].status == 200


async def test_the_owner_page_is_refused_to_a_non_owner_and_shown_to_the_owner(web):
    runtime, browser = web
    ann = Chat(runtime, platform="telegram", user="2", chat_id="2")
    owner = Chat(runtime, platform="telegram", user="1", chat_id="1")
    await ann.say("hello")
    anns = await signed_in(browser, ann)
    response, body = await anns.request("GET", "/owner")
    assert response.status == 403 and "owner only" in body
    owners = await signed_in(browser, owner)
    response, body = await owners.request("GET", "/owner")
    assert response.status == 200
    assert "<svg" in body and body.count("<rect") == 2 * 30  # 30 days, tokens in and out
    assert "Mira" in body and "Aki" in body and "for everyone" in body
    assert re.search(r"<th>Everyone</th><td>1</td>", body)  # Ann's one turn today
    today = runtime.gate.budgets.today()
    labels = re.findall(r'font-size="11" fill="#555">(\d\d-\d\d)</text>', body)
    assert len(labels) == 6 and labels[-1] == today[5:]  # every fifth day, counted back from today's, shown


async def test_the_owner_page_counts_reminders_sent_by_the_same_days_as_the_stats(web, clock):
    """Today is the calendar day in [limits] timezone (UTC here; the clock says 08:00), as in the
    tables above it: a letter sent at 22:00 yesterday is one of the last 7 days, not of today."""
    runtime, browser = web
    ann, store = Chat(runtime), runtime.store
    await ann.say("remind me, twice")
    person = await ann.person_id()
    conversation = (await runtime.cast.conversation_for(ann.key)).id
    mira = runtime.cast.character("Mira").id
    turn = (await store.turns.latest_turn(conversation)).id
    for hours_ago in (10, 0):  # 22:00 yesterday, then now
        clock.now -= hours_ago * 3600
        reminder = await store.reminders.add(person, mira, conversation, turn, clock(), "UTC", "tea", "once", 25)
        letter = await store.reminders.keep(reminder, None, "Mira", "Tea time!", 3, {})
        await store.turns.shown(letter.id, [str(hours_ago)])
        clock.now += hours_ago * 3600
    owners = await signed_in(browser, Chat(runtime, platform="telegram", user="1", chat_id="1"))
    _, body = await owners.request("GET", "/owner")
    assert "Reminders sent: 1 today, 2 in the last 7 days." in body


async def test_a_change_on_the_page_follows_the_commands_rules(web):
    runtime, browser = web
    ann = Chat(runtime)
    page = await signed_in(browser, ann)
    mira = str(runtime.cast.character("Mira").id)
    response, body = await page.act("add", character=mira, text="x" * 501)
    assert response.status == 400 and "501" in body and "500" in body
    for n in range(20):
        assert (await ann.run("add", text=f"fact {n}", pin=True)).ok
    response, body = await page.act("add", character=mira, text="one pin too many", pin="yes")
    assert response.status == 400 and "20 pinned" in body
    response, body = await page.act("add", character=mira, text="I live by the sea", scope="global")
    assert response.status == 200 and "I live by the sea" in body
    assert "I live by the sea" in (await Chat(runtime).memory("/memory view global")).text


async def test_a_character_access_does_not_let_in_is_not_on_the_page(llm, tmp_path, clock):
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    raw["characters"].append({"name": "Aki", "persona": "You are Aki.", "access": {"deny": ["telegram:2"]}})
    raw["web"] = {}
    async with serving(parse_config(raw, base=tmp_path), clock) as (runtime, browser):
        page = browser()
        await page.open(await link_for(Chat(runtime, platform="telegram", user="2", chat_id="2")))
        _, body = await page.request("GET", "/")
        assert "<h2>Mira</h2>" in body and "<h2>Aki</h2>" not in body
        aki = str(runtime.cast.character("Aki").id)
        response, body = await page.act("add", character=aki, text="sneaking in")
        assert response.status == 404 and "not on your page" in body


async def test_forgetme_on_the_page_asks_first_then_deletes_everything_and_ends_the_session(web):
    runtime, browser = web
    ann = Chat(runtime)
    await ann.memory("/memory add I am allergic to peanuts")
    page = await signed_in(browser, ann)
    response, body = await page.request("GET", "/forget")
    assert response.status == 200 and "cannot be undone" in body
    response, body = await page.request("POST", "/forget", {"csrf": await page.form_token()})  # not confirmed
    assert response.status == 400 and "peanuts" in (await ann.memory("/memory view")).text
    token = await page.form_token()
    response, body = await page.request("POST", "/forget", {"csrf": token, "confirm": "yes"})
    assert response.status == 200 and "Everything stored about you is deleted" in body
    assert "peanuts" not in (await ann.memory("/memory view")).text
    response, _ = await page.request("GET", "/")
    assert response.status == 401


async def test_forgetme_on_the_page_confirmed_as_the_accounts_are_linked_deletes_nothing_and_says_so(web):
    """The page's /forgetme lands just after Ann's account was linked into another (staged): the
    person the page asked for is no longer there, so nothing is deleted and the page says so."""
    runtime, browser = web
    ann, on_discord = Chat(runtime), Chat(runtime, user="111", chat_id="dm-d", platform="discord")
    await ann.memory("/memory add I am allergic to peanuts")
    page = await signed_in(browser, ann)
    token = await page.form_token()
    forget_person = runtime.store.people.forget_person

    async def after_the_link(person_id, day):
        await link(on_discord, ann)  # Ann's console person goes into the Discord one
        return await forget_person(person_id, day)

    runtime.store.people.forget_person = after_the_link
    response, body = await page.request("POST", "/forget", {"csrf": token, "confirm": "yes"})
    runtime.store.people.forget_person = forget_person
    assert response.status == 409 and "Nothing was deleted" in body and "Send /forgetme again" in body
    assert "peanuts" in (await on_discord.memory("/memory view")).text


async def test_the_export_is_the_persons_memories_as_json(web):
    runtime, browser = web
    ann, bob = Chat(runtime), Chat(runtime, user="bob", name="Bob", chat_id="dm-bob")
    await ann.memory("/memory add I am allergic to peanuts")
    await bob.memory("/memory add Bob likes boats")
    page = await signed_in(browser, ann)
    response, body = await page.request("GET", "/export")
    assert response.headers["Content-Disposition"].startswith('attachment; filename="keepsake-export-')
    assert [m["content"] for m in json.loads(body)["memories"]] == ["I am allergic to peanuts"]


async def test_linked_accounts_see_one_page(web):
    runtime, browser = web
    on_telegram = Chat(runtime, platform="telegram", user="7", chat_id="7")
    on_discord = Chat(runtime, platform="discord", user="70", chat_id="d70")
    await on_discord.memory("/memory add I paint boats")
    code = re.search(r"code is (\w+)", (await on_telegram.memory("/link")).text).group(1)
    asked = await on_discord.memory(f"/link {code}")
    await on_discord.press(asked.buttons[0][0].action)
    page = await signed_in(browser, on_telegram)
    _, body = await page.request("GET", "/")
    assert "I paint boats" in body


async def test_the_persons_persona_reminders_summaries_and_usage_are_on_the_page(web, llm):
    runtime, browser = web
    ann = Chat(runtime)
    await ann.memory("/persona set I'm Ann, a sailor with a scar")
    await ann.say("hello Mira")
    page = await signed_in(browser, ann)
    _, body = await page.request("GET", "/")
    assert "a sailor with a scar" in body and "Mira on Console" in body and "Your tokens today" in body
    response, body = await page.act("persona", text="I'm Ann, a painter")
    assert response.status == 200 and "a painter" in body
    assert (await runtime.store.people.persona(await ann.person_id())).text == "I'm Ann, a painter"


async def test_a_link_made_by_one_process_opens_on_another_sharing_postgresql(llm, tmp_path, clock):
    """Two bot processes on one PostgreSQL, each serving the page: the link, the session and the
    form token are the database's, so either process serves what the other began."""
    from tests.postgres import fresh_schema_url

    schemas = fresh_schema_url()
    url = await anext(schemas)
    config = web_config(llm, tmp_path)
    config = config.model_copy(update={"storage": config.storage.model_copy(update={"url": url})})
    try:
        async with serving(config, clock) as (first, on_first), serving(config, clock) as (second, on_second):
            ann = Chat(first)
            await ann.memory("/memory add I keep bees")
            browser_on_second = on_second()
            response, _ = await browser_on_second.open(await link_for(ann))  # made by the first, opened on the second
            assert response.status == 303
            browser_on_first = on_first()  # the same browser, its next request reaching the other process
            browser_on_first.cookie = browser_on_second.cookie
            mira = str(first.cast.character("Mira").id)
            memory_id = re.search(r"#(\d+)", (await ann.memory("/memory view")).text).group(1)
            response, body = await browser_on_first.act("pin", character=mira, id=memory_id)
            assert response.status == 200 and "Pinned" in body
            assert "📌" in (await Chat(second).memory("/memory view")).text
    finally:
        await anext(schemas, None)


async def test_each_change_on_the_page_is_the_commands_and_the_next_view_sees_it(web, clock):
    """Edit, unpin, delete, Learn from chat and a reminder's cancel, each from the page: what
    /memory view, /memory learning and /reminders say next (and Bob's cancel of Ann's: 404)."""
    runtime, browser = web
    ann, bob = Chat(runtime), Chat(runtime, user="bob", name="Bob", chat_id="dm-bob")
    first = re.search(r"#(\d+)", (await ann.run("add", text="I keep bees", pin=True)).text).group(1)
    second = re.search(r"#(\d+)", (await ann.memory("/memory add I hate fog")).text).group(1)
    await ann.say("hello")
    conversation = (await runtime.cast.conversation_for(ann.key)).id
    turn = (await runtime.store.turns.latest_turn(conversation)).id
    reminder = await runtime.store.reminders.add(await ann.person_id(), runtime.cast.character("Mira").id,
                                                 conversation, turn, clock() + 3600, "UTC", "water the plants",
                                                 "once", 25)
    await runtime.store.reminders.add(await ann.person_id(), runtime.cast.character("Mira").id, conversation, turn,
                                      clock() + 600, "UTC", "call the harbour", "once", 25)  # sooner: Ann's number 1
    page = await signed_in(browser, ann)
    _, body = await page.request("GET", "/")
    assert "water the plants" in body
    mira = str(runtime.cast.character("Mira").id)
    assert (await page.act("edit", character=mira, id=first, text="I keep two hives of bees"))[0].status == 200
    assert (await page.act("unpin", character=mira, id=first))[0].status == 200
    assert (await page.act("delete", character=mira, id=second))[0].status == 200
    assert (await page.act("learning", character=mira, state="off"))[0].status == 200
    bobs = await signed_in(browser, bob)
    response, _ = await bobs.act("cancel_reminder", id=str(reminder.id))
    assert response.status == 404
    response, body = await page.act("cancel_reminder", id=str(reminder.id))  # the page names it by id
    assert response.status == 200 and "Reminder 2 is cancelled." in body  # as /reminders numbers it
    view = (await ann.memory("/memory view")).text
    assert "I keep two hives of bees" in view and "📌" not in view and "I hate fog" not in view
    assert "Learn from chat is off" in (await ann.memory("/memory learning")).text
    reminders = (await ann.memory("/reminders")).text
    assert "water the plants" not in reminders and "call the harbour" in reminders


# -- it holds against the open internet (#60) -------------------------------------------------
async def test_a_code_sent_from_another_site_opens_nothing_and_leaves_the_signed_in_session_alone(web):
    """Login CSRF: Mallory's own link, auto-submitted by a page of another site while Ann is
    signed in, must not swap Ann's cookie for a session of Mallory's page."""
    runtime, browser = web
    ann = browser()
    await ann.open(await link_for(Chat(runtime)))
    anns_cookie = ann.cookie
    mallorys = await link_for(Chat(runtime, user="mallory", name="Mallory", chat_id="dm-mallory"))
    code = mallorys.rsplit("/open/", 1)[1]
    response, body = await ann.request("POST", "/open", {"code": code}, site="cross-site")
    assert response.status == 403 and "another site" in body and ann.cookie == anns_cookie
    for header in ("Content-Security-Policy", "X-Frame-Options", "Cache-Control"):
        assert header in response.headers
    async with aiohttp.ClientSession() as bare:  # says neither Origin nor Sec-Fetch-Site: refused too
        async with bare.post(ann.base + "/open", data={"code": code}, allow_redirects=False) as response:
            assert response.status == 403
    mallory = browser()
    response, _ = await mallory.open(mallorys)  # her code was never spent by the refusals
    assert response.status == 303


async def test_a_public_url_written_in_capitals_still_gives_a_secure_cookie(llm, tmp_path, clock):
    config = web_config(llm, tmp_path, public_url="HTTPS://Keepsake.example.com")
    async with serving(config, clock) as (runtime, browser):
        response, _ = await browser().open(await link_for(Chat(runtime)))
        assert response.cookies[COOKIE]["secure"]


async def test_a_public_url_with_a_path_keeps_every_link_form_redirect_and_cookie_under_it(llm, tmp_path, clock):
    config = web_config(llm, tmp_path, public_url="https://example.com/keepsake/")
    async with serving(config, clock) as (runtime, browser):
        link = await link_for(Chat(runtime))
        assert link.startswith("https://example.com/keepsake/open/")
        ann = browser()  # the proxy strips /keepsake before it reaches the bot
        code = link.rsplit("/open/", 1)[1]
        _, body = await ann.request("GET", f"/open/{code}")
        assert 'action="/keepsake/open"' in body and 'href="/keepsake/style.css"' in body
        response, _ = await ann.request("POST", "/open", {"code": code})
        assert response.headers["Location"] == "/keepsake/" and response.cookies[COOKIE]["path"] == "/keepsake/"
        _, body = await ann.request("GET", "/")
        assert 'action="/act/' not in body and 'action="/keepsake/act/add"' in body


@pytest.mark.parametrize("content_type, body", [
    ("multipart/form-data; boundary=xyz", b"--xyz\r\nContent-Disposition: form-data; name=\"code\"\r\n\r\nabc"),
    ("application/x-www-form-urlencoded; charset=no-such-charset", b"code=abc"),
])
async def test_a_malformed_body_is_a_400_with_the_security_headers_never_a_traceback(web, content_type, body, caplog):
    runtime, browser = web
    page = browser()
    async with page.http.post(page.base + "/open", data=body, headers={
            "Content-Type": content_type, "Origin": page.base, "Sec-Fetch-Site": "same-origin"}) as response:
        assert response.status == 400
        assert all(header in response.headers for header in ("Content-Security-Policy", "X-Frame-Options"))
    assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)


async def test_a_deflated_body_that_is_not_deflate_is_a_400(web):
    runtime, browser = web
    page = browser()
    async with page.http.post(page.base + "/open", data=b"not deflate at all", headers={
            "Content-Type": "application/x-www-form-urlencoded", "Content-Encoding": "deflate",
            "Origin": page.base, "Sec-Fetch-Site": "same-origin"}) as response:
        assert response.status == 400 and "Content-Security-Policy" in response.headers


async def test_half_open_connections_are_closed_after_the_read_deadline_and_capped(web, monkeypatch):
    import asyncio

    import adapters.web.server as server

    monkeypatch.setattr(server, "READ_S", 0.5)
    monkeypatch.setattr(server, "MAX_CONNECTIONS", 20)
    runtime, browser = web
    port = int(browser().base.rsplit(":", 1)[1])
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(30)]
    for _, writer in held:
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")  # the headers never end
    closed = await asyncio.wait_for(asyncio.gather(*[reader.read() for reader, _ in held]), 5)
    assert closed == [b""] * 30  # 10 closed as they came (over the cap), 20 at the deadline
    response, _ = await browser().request("GET", "/style.css")
    assert response.status == 200  # the page still answers
    for _, writer in held:
        writer.close()


async def test_trusted_proxies_name_who_may_say_whom_they_forward_for(llm, tmp_path, clock):
    """[web] trusted_proxies = ["127.0.0.2"]: a proxy there is believed; a peer at 127.0.0.1 — not
    a proxy of ours any more — is not, whatever X-Forwarded-For it sends."""
    config = web_config(llm, tmp_path, trusted_proxies=["127.0.0.2"])
    async with serving(config, clock) as (runtime, browser):
        page = browser()

        async def wrong_code(local: str, forwarded_for: str) -> int:
            connector = aiohttp.TCPConnector(local_addr=(local, 0))
            async with aiohttp.ClientSession(connector=connector) as http:
                async with http.post(page.base + "/open", data={"code": "wrong-code-aaaaaaaaaaaa"}, headers={
                        "Origin": page.base, "Sec-Fetch-Site": "same-origin",
                        "X-Forwarded-For": forwarded_for}) as response:
                    return response.status
        assert [await wrong_code("127.0.0.2", "203.0.113.5") for _ in range(6)] == [403] * 5 + [429]
        assert await wrong_code("127.0.0.2", "198.51.100.7") == 403  # another visitor behind the proxy
        assert [await wrong_code("127.0.0.1", f"192.0.2.{n}") for n in range(6)] == [403] * 5 + [429]  # its own


async def test_a_person_denied_after_opening_a_session_sees_why_and_changes_nothing(llm, tmp_path, clock):
    """SPEC 21 "Rules asked again": Ann opened her page; the owner then denies her Mira
    ([access], a restart). Her session still opens the page, which says why and changes nothing."""
    config = web_config(llm, tmp_path)
    async with serving(config, clock) as (runtime, browser):
        ann = Chat(runtime, user="501", platform="telegram")
        await ann.memory("/memory add I live on Harbour Lane")
        page = browser()
        await page.open(await link_for(ann))
        cookie = page.cookie
    raw = config_dict(llm.base_url, tmp_path / "keepsake.sqlite3")
    raw["characters"].append({"name": "Aki", "persona": "You are Aki, a retired sailor."})
    raw["characters"][0]["access"] = {"deny": [f"{ann.identity.platform}:{ann.identity.user_id}"]}
    raw["web"] = {"port": 8080}
    async with serving(parse_config(raw, base=tmp_path), clock) as (runtime, browser):
        page = browser()
        page.cookie = cookie
        response, body = await page.request("GET", "/")
        assert response.status == 200 and "no longer lets you reach Mira" in body and "Harbour Lane" not in body
        mira = str(runtime.cast.character("Mira").id)
        response, body = await page.act("add", text="I have a boat", scope="character", character=mira)
        assert "no longer lets you reach Mira" in body
        added = (await runtime.store.memories.history(await Chat(runtime, user="501", platform="telegram")
                                                      .person_id(), 0))[0]
        response, body = await page.act("undo", id=str(added.id))  # a change of Mira's memory: not hers to undo
        assert response.status == 404 and "Harbour Lane" not in body
        stored = await runtime.store.memories.export_person(await Chat(runtime, user="501",
                                                                       platform="telegram").person_id())
        assert [m["content"] for m in stored["memories"]] == ["I live on Harbour Lane"]  # nothing changed
