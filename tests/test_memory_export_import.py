"""SPEC 21 "Export and import": a person's memories and persona taken away as JSON or Markdown
(`/memory export [format]`, the page's links) and a JSON export brought back on the memory page
(a file upload, JavaScript off) — merged without duplicates, under the same limits, into the
importing person's own memories only. Over real HTTP on loopback, on SQLite and PostgreSQL (an
export from either imported into a fresh SQLite file)."""

import json

import aiohttp

from tests import test_memory_story
from tests.conftest import Chat
from tests.test_memory_page import serving, signed_in, web_config

web = test_memory_story.web  # the fixture: Mira and Aki, their page served on loopback, on either store


async def upload(page, export: bytes | str, filename: str = "keepsake-export.json"):
    form = aiohttp.FormData()
    form.add_field("csrf", await page.form_token())
    form.add_field("export", export.encode() if isinstance(export, str) else export, filename=filename,
                   content_type="application/json")
    return await page.request("POST", "/import", form)


async def exported(page) -> bytes:
    response, body = await page.request("GET", "/export")
    assert response.status == 200
    return body.encode()


async def test_an_export_imported_into_a_fresh_database_gives_the_same_memories_and_persona(web, llm, tmp_path,
                                                                                           clock):
    runtime, browser = web
    ann = Chat(runtime)
    for command in ("/memory add I am allergic to peanuts", "/memory add scope:global My sister is Ines",
                    "/persona set I'm Ann, a beekeeper"):
        assert (await ann.memory(command)).ok
    await ann.memory("/memory pin " + (await ann.memory("/memory add pin:yes I keep bees on the roof")).text
                     .split("#")[1].split()[0])
    file = await exported(await signed_in(browser, ann))
    (tmp_path / "fresh").mkdir()
    async with serving(web_config(llm, tmp_path / "fresh"), clock) as (fresh, fresh_browser):
        again = Chat(fresh)
        response, body = await upload(await signed_in(fresh_browser, again), file)
        assert response.status == 200, body
        assert "Imported 3 memories" in body and "your persona is the one in the file" in body
        before = json.loads(file)
        after = json.loads(await exported(await signed_in(fresh_browser, again)))
        kept = lambda data: sorted((m["scope"], m["character"], m["content"], m["pinned"]) for m in data["memories"])  # noqa: E731
        assert kept(after) == kept(before) and after["persona"] == before["persona"] == "I'm Ann, a beekeeper"


async def test_importing_the_same_export_twice_adds_nothing_the_second_time(web):
    runtime, browser = web
    ann = Chat(runtime)
    await ann.memory("/memory add I am allergic to peanuts")
    page = await signed_in(browser, ann)
    file = await exported(page)
    _, body = await upload(page, file)
    assert "Imported 0 memories; 1 was here already." in body
    assert (await ann.memory("/memory view")).text.count("allergic to peanuts") == 1


async def test_someone_elses_export_imported_writes_only_into_the_importers_own_memories(web):
    runtime, browser = web
    ann, bob = Chat(runtime), Chat(runtime, user="bob", name="Bob", chat_id="dm-bob")
    await bob.memory("/memory add Bob sails on Sundays")
    bobs = await exported(await signed_in(browser, bob))
    _, body = await upload(await signed_in(browser, ann), bobs)
    assert "Imported 1 memory." in body
    assert "Bob sails on Sundays" in (await ann.memory("/memory view")).text  # Ann's own copy now
    assert (await bob.memory("/memory view")).text.count("Bob sails on Sundays") == 1  # Bob's untouched


async def test_an_import_keeps_the_limits_and_takes_no_memory_for_a_character_the_page_does_not_show(web):
    runtime, browser = web
    ann = Chat(runtime)
    file = json.dumps({"persona": "x" * 1001, "memories": [
        {"scope": "character", "character": "Mira", "content": "fine", "pinned": False},
        {"scope": "character", "character": "Zed", "content": "for nobody here", "pinned": False},
        {"scope": "global", "character": None, "content": "y" * 501, "pinned": False},
        *({"scope": "character", "character": "Mira", "content": f"pin {n}", "pinned": True} for n in range(21))]})
    _, body = await upload(await signed_in(browser, ann), file)
    assert "Imported 21 memories" in body  # "fine" and 20 pins: the pin budget is 20 a scope
    assert "1 not: for a character your page does not show" in body
    assert "1 not: not a memory Keepsake can keep" in body
    assert "1 not: pinned character memories are at their limit of 20" in body
    assert "the file&#39;s persona was not taken: it is over 1,000 characters" in body
    assert await runtime.store.people.persona(await ann.person_id()) is None


async def test_a_file_that_is_not_an_export_is_refused_in_one_line_and_changes_nothing(web):
    runtime, browser = web
    ann = Chat(runtime)
    page = await signed_in(browser, ann)
    response, body = await upload(page, "not json at all")
    assert response.status == 400 and "That file is not a Keepsake export" in body
    response, body = await upload(page, '{"memories": "nope"}')
    assert response.status == 400 and "it has no list of memories" in body
    assert "No saved memories" in (await ann.memory("/memory view")).text or \
        "no saved memories" in (await ann.memory("/memory view")).text.lower()


async def test_the_markdown_export_lists_the_persona_and_each_characters_memories_pinned_first(web):
    runtime, browser = web
    ann = Chat(runtime)
    await ann.memory("/persona set I'm Ann, a beekeeper")
    await ann.memory("/memory add I am allergic to peanuts")
    await ann.memory("/memory add pin:yes I keep bees on the roof")
    await ann.memory("/memory add scope:global My sister is Ines")
    answer = await ann.memory("/memory export markdown")
    assert answer.attachment.filename.endswith(".md")
    text = answer.attachment.data.decode()
    assert text.startswith("# What the characters remember about you")
    assert "## Your persona\n\nI'm Ann, a beekeeper" in text
    mira = text.split("## Only Mira\n\n")[1].split("\n\n")[0].splitlines()
    assert mira[0].startswith("- 📌 I keep bees on the roof") and mira[1].startswith("- I am allergic to peanuts")
    assert "## Every character (global)\n\n- My sister is Ines" in text
    response, body = await (await signed_in(browser, ann)).request("GET", "/export.md")
    assert response.headers["Content-Type"].startswith("text/markdown") and "## Only Mira" in body


async def test_a_whole_export_at_its_longest_is_imported(web):
    """240 memories of 500 characters (four bytes each): the largest export there can be uploads."""
    runtime, browser = web
    long = "🐐" * 495
    memories = [{"scope": scope, "character": "Mira", "content": f"{n:03} {long}", "pinned": pinned}
                for scope in ("character", "global") for n, pinned in
                [(n, False) for n in range(100)] + [(100 + n, True) for n in range(20)]]
    file = json.dumps({"persona": "p" * 1000, "memories": memories}, ensure_ascii=False)
    assert len(file.encode()) > 240 * 500 * 4
    response, body = await upload(await signed_in(browser, Chat(runtime)), file)
    assert response.status == 200 and "Imported 240 memories" in body
