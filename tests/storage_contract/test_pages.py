"""The Pages port (SPEC 21) on every backend: a link is spent once (two stores, two processes),
only within its time; a session lasts its time and ends; wrong codes are counted by address;
links and sessions go with their person (/forgetme) and follow a link of accounts."""

import asyncio

from storage.ports import PageSession, Store

NOW = 1_800_000_000.0
TEN_MINUTES = 600
TWELVE_HOURS = 12 * 3600


async def test_a_link_opens_one_session_once_even_from_two_processes(open_backend, clock):
    first, second = await open_backend(), await open_backend()
    ann = await first.people.person_for_identity("telegram", "501")
    await first.pages.add_link("code-hash", ann, (1, 2), NOW + TEN_MINUTES)
    opened = await asyncio.gather(
        first.pages.exchange("code-hash", NOW, "token-a", "csrf-a", NOW + TWELVE_HOURS),
        second.pages.exchange("code-hash", NOW, "token-b", "csrf-b", NOW + TWELVE_HOURS))
    assert [s is None for s in opened].count(True) == 1  # exactly one of the two
    session = next(s for s in opened if s is not None)
    assert session.person_id == ann and session.characters == (1, 2)
    token = "token-a" if session.csrf == "csrf-a" else "token-b"
    assert await second.pages.session(token, NOW + 60) == session  # the other process knows it


async def test_a_link_past_its_ten_minutes_opens_nothing(store: Store, ann):
    await store.pages.add_link("code-hash", ann, (1,), NOW + TEN_MINUTES)
    assert await store.pages.exchange("code-hash", NOW + TEN_MINUTES + 1, "t", "c", NOW + TWELVE_HOURS) is None


async def test_a_new_link_ends_the_persons_unspent_one(store: Store, ann):
    await store.pages.add_link("old", ann, (1,), NOW + TEN_MINUTES)
    await store.pages.add_link("new", ann, (1,), NOW + TEN_MINUTES)
    assert await store.pages.exchange("old", NOW, "t1", "c", NOW + TWELVE_HOURS) is None
    assert await store.pages.exchange("new", NOW, "t2", "c", NOW + TWELVE_HOURS) is not None


async def test_a_new_link_leaves_another_persons_link_alone(store: Store, ann):
    bob = await store.people.person_for_identity("telegram", "502")
    await store.pages.add_link("ann's", ann, (1,), NOW + TEN_MINUTES)
    await store.pages.add_link("bob's", bob, (1,), NOW + TEN_MINUTES)
    assert await store.pages.exchange("ann's", NOW, "t1", "c", NOW + TWELVE_HOURS) is not None


async def test_a_session_lasts_its_time_and_ends_when_asked(store: Store, ann):
    await store.pages.add_link("code", ann, (1,), NOW + TEN_MINUTES)
    await store.pages.exchange("code", NOW, "token", "csrf", NOW + TWELVE_HOURS)
    assert await store.pages.session("token", NOW + TWELVE_HOURS) == PageSession(ann, (1,), "csrf", NOW + TWELVE_HOURS)
    assert await store.pages.session("token", NOW + TWELVE_HOURS + 1) is None
    await store.pages.end_session("token")
    assert await store.pages.session("token", NOW) is None


async def test_wrong_codes_are_counted_by_address_and_time(store: Store):
    assert [await store.pages.add_failure("203.0.113.9", at, NOW) for at in (NOW, NOW + 1)] == [1, 2]
    assert await store.pages.add_failure("198.51.100.7", NOW + 700, NOW) == 1
    assert await store.pages.add_failure("203.0.113.9", NOW + 700, NOW + 100) == 1  # the two before are older
    assert await store.pages.add_failure("203.0.113.9", NOW + 701, NOW) == 4


async def test_wrong_codes_tried_at_once_from_two_processes_are_each_counted_once(open_backend):
    first, second = await open_backend(), await open_backend()
    counts = await asyncio.gather(*[(first if n % 2 else second).pages.add_failure("203.0.113.9", NOW, NOW)
                                    for n in range(20)])
    assert sorted(counts) == list(range(1, 21))  # no two judged as the same wrong code


async def test_forgetme_ends_the_persons_links_and_sessions(store: Store, ann):
    await store.pages.add_link("code", ann, (1,), NOW + TEN_MINUTES)
    await store.pages.add_link("code2", ann, (1,), NOW + TEN_MINUTES)
    await store.pages.exchange("code2", NOW, "token", "csrf", NOW + TWELVE_HOURS)
    await store.pages.add_link("code3", ann, (1,), NOW + TEN_MINUTES)
    await store.people.forget_person(ann, "2027-01-15")
    assert await store.pages.session("token", NOW) is None
    assert await store.pages.exchange("code3", NOW, "t", "c", NOW + TWELVE_HOURS) is None


async def test_linking_accounts_keeps_the_session_for_the_one_person(store: Store, ann):
    on_discord = await store.people.person_for_identity("discord", "901")
    await store.pages.add_link("code", on_discord, (1,), NOW + TEN_MINUTES)
    await store.pages.exchange("code", NOW, "token", "csrf", NOW + TWELVE_HOURS)
    await store.people.merge_persons(ann, on_discord)
    assert (await store.pages.session("token", NOW)).person_id == ann
