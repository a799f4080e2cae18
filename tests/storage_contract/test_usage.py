"""SPEC 17 through the People and Usage ports on every backend: a person's persona, and what is
spent on their behalf by day and character — summed across calls (and processes: the rows are
the database's), told once a day, joined by /link, gone with /forgetme."""

import asyncio

from storage.ports import DayTotals, Persona, Spend

DAY, NEXT_DAY = "2026-12-03", "2026-12-04"


async def test_each_person_spends_and_draws_pictures_against_their_own_day(store, ann, mira):
    bob = await store.people.person_for_identity("telegram", "502")
    await store.usage.add_turn(ann, mira, DAY, 1_000, 200)
    assert await store.usage.take_picture(ann, mira, DAY, per_day=1, tokens=50)
    assert await store.usage.spent(bob, DAY, DAY) == 0
    assert await store.usage.pictures(bob, DAY) == 0
    assert await store.usage.take_picture(bob, mira, DAY, per_day=1, tokens=50)  # Ann's picture is not his
    await store.usage.give_back_picture(bob, mira, DAY, tokens=50)
    assert (await store.usage.pictures(ann, DAY), await store.usage.spent(ann, DAY, DAY)) == (1, 1_250)


async def test_a_persona_is_set_replaced_and_cleared(store, ann):
    assert await store.people.persona(ann) is None
    await store.people.set_persona(ann, Persona("a sailor", 3))
    await store.people.set_persona(ann, Persona("a sailor with a scar", 5))
    assert await store.people.persona(ann) == Persona("a sailor with a scar", 5)
    await store.people.set_persona(ann, None)
    assert await store.people.persona(ann) is None


async def test_tokens_add_up_by_person_and_day_and_the_notice_is_given_once_a_day(store, ann, mira):
    aki = await store.characters.ensure_character("Aki")
    await store.usage.add_turn(ann, mira, DAY, 1_000, 200)
    await store.usage.add_turn(ann, aki, DAY, 500, 50)
    await store.usage.add_turn(ann, mira, NEXT_DAY, 10, 1)
    await store.usage.add_checkin(ann, mira, DAY)
    assert await store.usage.spent(ann, DAY, DAY) == 1_750
    assert await store.usage.spent(ann, DAY, NEXT_DAY) == 1_761
    totals = await store.usage.totals(DAY, DAY)
    assert totals[None] == DayTotals(turns=2, tokens_in=1_500, tokens_out=250, people=1, checkins=1)
    assert totals["Mira"] == DayTotals(1, 1_000, 200, 1, 1) and totals["Aki"] == DayTotals(1, 500, 50, 1, 0)
    assert [await store.usage.notice_once(ann, DAY) for _ in range(3)] == [True, False, False]
    assert await store.usage.notice_once(ann, NEXT_DAY)


async def test_the_top_spenders_are_named_as_they_last_wrote(store, chat, ann, mira):
    bob = await store.people.person_for_identity("console", "bob")
    await store.conversations.add_user_message(chat, ann, "Ann", "hello", 1, None)
    await store.conversations.add_user_message(chat, ann, "Annie", "hello again", 2, None)
    await store.usage.add_turn(ann, mira, DAY, 100, 10)
    await store.usage.add_turn(bob, mira, DAY, 1_000, 10)
    assert await store.usage.top_spenders(DAY, DAY, 5) == [(f"person {bob}", 1_010), ("Annie", 110)]
    assert await store.usage.top_spenders(DAY, DAY, 1) == [(f"person {bob}", 1_010)]


async def test_link_adds_up_what_both_spent_and_keeps_one_persona(store, ann, mira):
    other = await store.people.person_for_identity("telegram", "ann-too")
    await store.people.set_persona(other, Persona("a sailor", 3))
    await store.usage.add_turn(ann, mira, DAY, 100, 10)
    await store.usage.add_turn(other, mira, DAY, 200, 20)
    await store.usage.notice_once(other, DAY)
    await store.people.merge_persons(ann, other)
    assert await store.usage.spent(ann, DAY, DAY) == 330
    assert await store.people.persona(ann) == Persona("a sailor", 3)
    assert not await store.usage.notice_once(ann, DAY)  # told already, as the other account


async def test_forgetting_a_person_keeps_only_todays_spend_against_their_platform_id(store, ann, mira):
    """SPEC 17: /forgetme does not give a fresh allowance — the day's spend stays as a count
    against the platform id (and in /stats), nothing else; an earlier day's is gone with them."""
    await store.people.set_persona(ann, Persona("a sailor", 3))
    await store.usage.add_turn(ann, mira, DAY, 1_000, 100)
    await store.usage.add_turn(ann, mira, NEXT_DAY, 100, 10)
    await store.people.forget_person(ann, NEXT_DAY)
    assert await store.usage.totals(DAY, DAY) == {None: DayTotals(0, 0, 0, 0, 0)}
    assert (await store.usage.totals(NEXT_DAY, NEXT_DAY))[None] == DayTotals(1, 100, 10, 0, 0)
    assert await store.db.value("SELECT COUNT(*) FROM budget_notices") == 0
    back = await store.people.person_for_identity("telegram", "501")  # writes again: a new person
    assert await store.people.persona(back) is None
    assert await store.usage.spent(back, NEXT_DAY, NEXT_DAY) == 110
    assert await store.usage.spent(back, DAY, DAY) == 0
    stranger = await store.people.person_for_identity("telegram", "502")
    assert await store.usage.spent(stranger, NEXT_DAY, NEXT_DAY) == 0


async def running_turn(store, person: int, mira: int) -> int:
    return (await asked(store, person, mira))[0]


async def asked(store, person: int, mira: int):
    """A running turn, and the message it answers."""
    chat = (await store.conversations.conversation("telegram", f"dm-{person}-{mira}", None, mira, False)).id
    message = await store.conversations.add_user_message(chat, person, "Ann", "hello", 1, None)
    return await store.turns.start_turn(await store.turns.queue_turn(chat, person, message.id)), message


async def test_a_turn_adds_its_last_calls_cost_as_it_ends_so_the_allowance_never_counts_both_or_neither(
        store, ann, mira):
    """SPEC 17 "A budget holds under a burst": a turn's last model call is added to the person's
    day in the transaction that ends the turn and its hold — answered (`finish_turn`) or failed
    (`fail_turn`) — so no moment counts the hold and the cost at once, or neither."""
    aki = await store.characters.ensure_character("Aki")
    (first, message), second = await asked(store, ann, mira), await running_turn(store, ann, aki)
    assert await store.usage.hold(first, ann, DAY, 1_000, allowance=300)
    await store.turns.finish_turn(first, message, "Mira", "hello to you", 3, {}, spend=Spend(ann, mira, DAY, 100, 50))
    assert await store.usage.spent(ann, DAY, DAY) == 150
    assert (await store.usage.totals(DAY, DAY))["Mira"] == DayTotals(1, 100, 50, 1, 0)
    assert await store.usage.hold(second, ann, DAY, 1_000, allowance=300)  # 150 spent, nothing held
    await store.turns.fail_turn(second, spend=Spend(ann, aki, DAY, 100, 50))  # its reply was empty: spent all the same
    assert await store.usage.spent(ann, DAY, DAY) == 300
    assert not await store.usage.hold(await running_turn(store, ann, aki), ann, DAY, 10, allowance=300)


async def test_a_running_turn_holds_what_it_may_spend_so_a_burst_stops_at_the_allowance(store, ann, mira):
    """SPEC 17 "A budget holds under a burst": a turn may start while what was spent plus what
    running turns hold is under the allowance; a turn that finishes holds nothing more."""
    aki = await store.characters.ensure_character("Aki")
    first, second = await running_turn(store, ann, mira), await running_turn(store, ann, aki)
    assert await store.usage.hold(first, ann, DAY, 1_000, allowance=300)  # nothing spent, nothing held
    assert not await store.usage.hold(second, ann, DAY, 1_000, allowance=300)  # the first may spend 1,000
    await store.usage.add_turn(ann, mira, DAY, 100, 50)
    await store.turns.fail_turn(first)  # it ended: its hold is over, its 150 spent
    assert await store.usage.hold(second, ann, DAY, 1_000, allowance=300)
    await store.usage.add_turn(ann, aki, DAY, 100, 50)
    await store.turns.fail_turn(second)
    third = await running_turn(store, ann, mira)
    assert not await store.usage.hold(third, ann, DAY, 10, allowance=300)  # exactly 300 spent: past it


async def test_a_burst_of_holds_from_two_processes_lets_exactly_one_turn_start(open_backend):
    """SPEC 17 "A budget holds under a burst", decided in the database: 16 turns of one person,
    each asking at once, through two processes, to hold 1,000 of a 1,000-token day: one starts."""
    first, second = await open_backend(), await open_backend()
    characters = [await first.characters.ensure_character(f"Character {n}") for n in range(16)]
    for person in range(5):  # five people, one after another: the later bursts meet warm connection pools
        ann = await first.people.person_for_identity("telegram", f"50{person}")
        turns = [await running_turn(first, ann, character) for character in characters]
        held = await asyncio.gather(*((first if n % 2 else second).usage.hold(turn, ann, DAY, 1_000, allowance=1_000)
                                      for n, turn in enumerate(turns)))
        assert held.count(True) == 1, person


async def test_a_forgotten_person_with_two_accounts_is_counted_once_in_stats_and_held_on_both(store, ann, mira):
    """SPEC 17: linked accounts are one person — /forgetme keeps the day's spend against each
    platform id (neither starts afresh), and /stats counts it once."""
    other = await store.people.person_for_identity("discord", "601")
    await store.people.merge_persons(ann, other)
    await store.usage.add_turn(ann, mira, DAY, 100, 10)
    await store.people.forget_person(ann, DAY)
    assert (await store.usage.totals(DAY, DAY))[None] == DayTotals(1, 100, 10, 0, 0)
    for platform, user in (("telegram", "501"), ("discord", "601")):
        back = await store.people.person_for_identity(platform, user)
        assert await store.usage.spent(back, DAY, DAY) == 110


async def test_a_forgotten_persons_spend_and_pictures_count_only_against_their_own_platform_id(store, ann, mira):
    """What Bob spent and drew the day he left is kept against his platform id only: Ann's
    allowance and her pictures of the day are her own."""
    bob = await store.people.person_for_identity("telegram", "502")
    await store.usage.add_turn(bob, mira, DAY, 300, 30)
    assert await store.usage.take_picture(bob, mira, DAY, per_day=1, tokens=50)
    await store.people.forget_person(bob, DAY)
    back = await store.people.person_for_identity("telegram", "502")  # writes again: a new person
    assert (await store.usage.spent(back, DAY, DAY), await store.usage.pictures(back, DAY)) == (380, 1)
    assert (await store.usage.spent(ann, DAY, DAY), await store.usage.pictures(ann, DAY)) == (0, 0)


async def test_pictures_are_counted_by_day_across_characters_with_their_tokens_and_given_back(open_backend, ann, mira):
    here, there = await open_backend(), await open_backend()  # two processes
    aki = await here.characters.ensure_character("Aki")
    assert await here.usage.take_picture(ann, mira, "2027-01-15", 2, 1000)
    assert await there.usage.take_picture(ann, aki, "2027-01-15", 2, 1000)
    assert not await here.usage.take_picture(ann, mira, "2027-01-15", 2, 1000)  # the third of 2 a day
    assert await here.usage.take_picture(ann, mira, "2027-01-16", 2, 1000)  # a new day
    assert await here.usage.spent(ann, "2027-01-15", "2027-01-15") == 2000
    assert await there.usage.pictures(ann, "2027-01-15") == 2 and await there.usage.pictures(ann, "2027-01-16") == 1
    await there.usage.give_back_picture(ann, aki, "2027-01-15", 1000)  # never drawn
    assert await here.usage.spent(ann, "2027-01-15", "2027-01-15") == 1000
    assert await here.usage.pictures(ann, "2027-01-15") == 1
    assert await here.usage.take_picture(ann, aki, "2027-01-15", 2, 1000)


async def test_tokens_by_day_add_up_every_person_and_what_forgotten_people_spent(store, ann, mira):
    bob = await store.people.person_for_identity("telegram", "502")
    await store.usage.add_turn(ann, mira, DAY, 1_000, 200)
    await store.usage.add_turn(bob, mira, DAY, 300, 30)
    await store.usage.add_turn(bob, mira, NEXT_DAY, 10, 1)
    await store.usage.add_turn(ann, mira, "2026-11-01", 7, 7)  # before the days asked for
    await store.people.forget_person(bob, NEXT_DAY)  # what he spent that day still counts
    # Bob's spend before the day he left went with him; his spend of that day is kept, unnamed
    assert await store.usage.daily(DAY, NEXT_DAY) == {DAY: (1_000, 200), NEXT_DAY: (10, 1)}
