"""SPEC 21 in a real headless browser (Debian's Chromium, driven by Playwright; nothing is
downloaded): the real `python -m bot` on the Telegram fake sends Ann her link in the DM, the
browser opens it, pins a memory with the page's own button, and the model's next prompt for
Ann holds that memory pinned. The page works without JavaScript: the browser runs with it off.
A screenshot of each page is taken (and, with KEEPSAKE_SCREENSHOTS=docs, kept for the README)."""

import os
import re
import shutil
import socket
from pathlib import Path

import pytest

from tests.conftest import ROOT, Chat, FakeClock
from tests.process import answer_to, bot_running, final_reply_to, mira_config
from tests.test_memory_page import link_for, serving, web_config

ANN = 831
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def system_prompt(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system"
                     and isinstance(m["content"], str))


@pytest.fixture
async def chromium():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI installs Debian's chromium (.ci/run); it is missing")
        pytest.skip("the browser test needs Debian's chromium (apt-get install chromium)")
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS)
        try:
            yield browser
        finally:
            await browser.close()


@pytest.mark.timeout(120)
async def test_ann_opens_her_link_in_a_browser_pins_a_memory_and_the_next_prompt_has_it_pinned(
        tmp_path, llm, telegram, chromium):
    port = free_port()
    config = mira_config(llm, f'[web]\nport = {port}\n\n[owner]\nids = ["telegram:{ANN}"]', telegram=telegram)
    async with bot_running(tmp_path, config, MIRA_TELEGRAM_TOKEN=telegram.token):
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        ann, dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
        saved = await answer_to(telegram, ANN, telegram.send(dm, ann, "/memory add I am allergic to peanuts"))
        memory_id = re.search(r"#(\d+)", saved.text).group(1)
        await final_reply_to(telegram, ANN, telegram.send(dm, ann, "Hello Mira!"))
        assert f"#{memory_id} (character" in system_prompt(llm.requests[-1])
        assert f"#{memory_id} (character, pinned" not in system_prompt(llm.requests[-1])

        answer = await answer_to(telegram, ANN, telegram.send(dm, ann, "/memory page"))
        link = re.search(r"http://\S+/open/\S+", answer.text).group(0)
        assert link.startswith(f"http://127.0.0.1:{port}/open/")

        context = await chromium.new_context(java_script_enabled=False)  # SPEC 21: works without it
        page = await context.new_page()
        await page.goto(link)
        await page.click("#open")
        await page.wait_for_url(f"http://127.0.0.1:{port}/")
        assert "/open/" not in page.url  # the address holds no secret any more
        assert await page.input_value(f"#memory-{memory_id} input[name=text]") == "I am allergic to peanuts"
        await page.click(f"#pin-{memory_id}")
        assert await page.inner_text("[role=status]") == \
            f"Pinned #{memory_id}. It is always remembered and only you can change it."
        cookies = await context.cookies()
        assert [(c["httpOnly"], c["sameSite"]) for c in cookies] == [(True, "Strict")]
        shots = Path(os.environ.get("KEEPSAKE_SCREENSHOTS") or tmp_path)
        if not shots.is_absolute():
            shots = ROOT / shots
        await page.screenshot(path=shots / "memory-page.png", full_page=True)
        await page.goto(f"http://127.0.0.1:{port}/owner")
        assert await page.locator("svg rect").count() == 60  # 30 days, tokens in and out
        await page.screenshot(path=shots / "owner-page.png", full_page=True)
        # On a phone, a notice quoting a long unbroken word wraps: the page never scrolls sideways (#62)
        await page.set_viewport_size({"width": 390, "height": 844})
        await page.goto(f"http://127.0.0.1:{port}/")
        await page.fill("form.add input[name=text]", "Kerlouan" * 50)  # one word, no place to break
        await page.click("form.add button[type=submit]")
        await page.wait_for_selector("[role=status]")
        assert await page.evaluate("document.documentElement.scrollWidth") <= 390
        await context.close()

        await final_reply_to(telegram, ANN, telegram.send(dm, ann, "What do you remember about me?"))
        assert f'#{memory_id} (character, pinned' in system_prompt(llm.requests[-1])
    for shot in ("memory-page.png", "owner-page.png"):
        assert (shots / shot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


MALLORY = 832
AUTO_SUBMIT = """<!doctype html><title>Free tide tables</title>
<form method="post" action="{action}"><input type="hidden" name="code" value="{code}"></form>
<script>document.forms[0].submit()</script>"""


@pytest.mark.timeout(120)
async def test_another_site_cannot_sign_ann_into_mallorys_page_in_a_real_browser(tmp_path, llm, telegram, chromium):
    """Login CSRF (#60): while Ann is signed in, a page of another site auto-submits Mallory's own
    link. Chromium sends it cross-site; the page refuses it, and Ann still sees her own page."""
    from aiohttp import web

    port = free_port()
    config = mira_config(llm, f"[web]\nport = {port}\n", telegram=telegram)
    async with bot_running(tmp_path, config, MIRA_TELEGRAM_TOKEN=telegram.token):
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        ann, mallory = telegram.user(ANN, "Ann"), telegram.user(MALLORY, "Mallory")
        await answer_to(telegram, ANN, telegram.send(telegram.chat(ANN), ann, "/memory add I live on Harbour Lane"))
        anns = await answer_to(telegram, ANN, telegram.send(telegram.chat(ANN), ann, "/memory page"))
        mallorys = await answer_to(telegram, MALLORY, telegram.send(telegram.chat(MALLORY), mallory, "/memory page"))
        anns_link = re.search(r"http://\S+/open/\S+", anns.text).group(0)
        mallorys_code = re.search(r"/open/(\S+)", mallorys.text).group(1)

        async def lure(request: web.Request) -> web.Response:  # the other site: another origin
            return web.Response(text=AUTO_SUBMIT.format(action=f"http://127.0.0.1:{port}/open", code=mallorys_code),
                                content_type="text/html")
        app = web.Application()
        app.router.add_get("/", lure)
        runner = web.AppRunner(app)
        await runner.setup()
        other = web.TCPSite(runner, "localhost", free_port())
        await other.start()
        try:
            context = await chromium.new_context()
            page = await context.new_page()
            await page.goto(anns_link)
            await page.click("#open")
            await page.wait_for_url(f"http://127.0.0.1:{port}/")
            anns_cookie = await context.cookies()
            await page.goto(f"http://localhost:{other._port}/")
            await page.wait_for_url(f"http://127.0.0.1:{port}/open")
            assert "another site" in await page.inner_text("body")
            assert await context.cookies() == anns_cookie  # her session, untouched
            await page.goto(f"http://127.0.0.1:{port}/")
            assert "I live on Harbour Lane" in await page.content()  # still Ann's own page
            await context.close()
        finally:
            await runner.cleanup()


@pytest.mark.timeout(120)
async def test_in_a_browser_each_memory_tells_its_story_and_a_delete_is_undone_with_its_pin(
        tmp_path, llm, telegram, chromium):
    """SPEC 21 "Every memory with its story", in Chromium with JavaScript off: a memory Mira wrote
    shows Ann's message it came from; her next reply's receipt lists it and links it; deleting it
    and pressing Undo brings it back pinned; the page's own export, imported there, adds nothing,
    and imported into another Keepsake on a fresh database brings the memory over, pinned."""
    from tests.fakes.llm_server import text, tool_calls

    port = free_port()
    config = mira_config(llm, f"[web]\nport = {port}\n", telegram=telegram)
    async with bot_running(tmp_path, config, MIRA_TELEGRAM_TOKEN=telegram.token):
        await telegram.wait_for(lambda: telegram.calls_to("getUpdates"), timeout=30)
        ann, dm = telegram.user(ANN, "Ann"), telegram.chat(ANN)
        llm.add(tool_calls(("save_memory", {"content": "Ann keeps three goats", "scope": "character"})),
                text("Three goats! Noted."), text("How are the goats?"))
        await final_reply_to(telegram, ANN, telegram.send(dm, ann, "I keep three goats on the hill"))
        await final_reply_to(telegram, ANN, telegram.send(dm, ann, "Good morning"))
        saved = await answer_to(telegram, ANN, telegram.send(dm, ann, "/memory pin 1"))
        assert saved.text.startswith("Pinned #1")
        answer = await answer_to(telegram, ANN, telegram.send(dm, ann, "/memory page"))
        link = re.search(r"http://\S+/open/\S+", answer.text).group(0)

        context = await chromium.new_context(java_script_enabled=False, accept_downloads=True)
        page = await context.new_page()
        await page.goto(link)
        await page.click("#open")
        await page.wait_for_url(f"http://127.0.0.1:{port}/")
        story = await page.inner_text("#memory-1 .story")
        assert "written by Mira mid-reply in your Telegram chat" in story
        assert "from your message “I keep three goats on the hill”" in story
        await page.click("details.replies summary")  # opens without JavaScript
        assert "#1" in await page.inner_text("details.replies li:first-child")  # the good-morning reply used it
        async with page.expect_download() as download:
            await page.click("text=Export (JSON)")
        exported = tmp_path / "export.json"
        await (await download.value).save_as(exported)

        await page.click("#delete-1")
        assert await page.locator("#memory-1").count() == 0
        await page.click("#history button[id^=undo-]")
        assert await page.inner_text("[role=status]") == "Undone: #1 is back (pinned)."
        assert "pinned" in await page.inner_text("#memory-1 .meta")

        await page.set_input_files("#import input[type=file]", str(exported))
        await page.click("#import button[type=submit]")
        assert await page.inner_text("[role=status]") == "Imported 0 memories; 1 was here already."

        (tmp_path / "fresh").mkdir()  # another Keepsake, on a fresh database: the export brings the memory over
        async with serving(web_config(llm, tmp_path / "fresh"), FakeClock()) as (fresh, browser):
            elsewhere = Chat(fresh, user=str(ANN), platform="telegram")
            link = await link_for(elsewhere)
            await page.goto(link.replace("http://127.0.0.1:8080", browser().base))
            await page.click("#open")
            await page.set_input_files("#import input[type=file]", str(exported))
            await page.click("#import button[type=submit]")
            assert await page.inner_text("[role=status]") == "Imported 1 memory."
            assert "📌 #1 · character · recent — Ann keeps three goats" in (await elsewhere.memory("/memory view")).text
        await context.close()
