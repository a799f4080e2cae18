"""SPEC 17 through the People and Usage ports on every backend: a person's persona, and what is
spent on their behalf by day and character — summed across calls (and processes: the rows are
the database's), told once a day, joined by /link, gone with /forgetme."""

from storage.ports import DayTotals, Persona

DAY, NEXT_DAY = "2026-12-03", "2026-12-04"


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


async def test_forgetting_a_person_forgets_their_persona_and_spending(store, ann, mira):
    await store.people.set_persona(ann, Persona("a sailor", 3))
    await store.usage.add_turn(ann, mira, DAY, 100, 10)
    await store.people.forget_person(ann)
    assert await store.usage.totals(DAY, DAY) == {None: DayTotals(0, 0, 0, 0, 0)}
    assert await store.db.value("SELECT COUNT(*) FROM budget_notices") == 0
