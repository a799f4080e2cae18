"""Rows are read by column name into the row types of storage/ports.py: each column list must
name its type's fields, in their order."""

import pytest

from storage import rows
from storage.ports import ConversationRow, MemoryRow, MessageRow, RebuildRow, SummaryRow, TurnRow


@pytest.mark.parametrize("listed, kind", [
    (rows.MEMORY_COLUMNS, MemoryRow), (rows.MESSAGE_COLUMNS, MessageRow), (rows.TURN_COLUMNS, TurnRow),
    (rows.CONVERSATION_COLUMNS, ConversationRow), (rows.SUMMARY_COLUMNS, SummaryRow),
    (rows.REBUILD_COLUMNS, RebuildRow),
])
def test_each_column_list_names_its_row_types_fields_in_order(listed, kind):
    assert rows.names(listed) == kind._fields


# A memory's columns in the reverse of MEMORY_COLUMNS' order: (name, value, PostgreSQL type).
REVERSED_MEMORY = [("updated_at", 20.0, "float8"), ("created_at", 10.0, "float8"), ("source", "person", "text"),
                   ("pinned", True, "bool"), ("tokens", 6, "int"), ("content", "Ann is allergic to peanuts", "text"),
                   ("character_id", None, "int"), ("person_id", 1, "int"), ("id", 7, "int")]
EXPECTED = MemoryRow(id=7, person_id=1, character_id=None, content="Ann is allergic to peanuts", tokens=6,
                     pinned=True, source="person", created_at=10.0, updated_at=20.0)


def test_a_result_whose_columns_come_in_another_order_is_read_by_name_on_sqlite():
    import sqlite3

    db = sqlite3.connect(":memory:")
    db.row_factory = sqlite3.Row
    select = "SELECT " + ", ".join(f"? AS {name}" for name, _, _ in REVERSED_MEMORY)
    result = db.execute(f"{select} UNION ALL {select}", [value for _, value, _ in REVERSED_MEMORY] * 2).fetchall()
    assert rows.memories(result) == [EXPECTED, EXPECTED]
    assert rows.memory(result[0]) == EXPECTED


async def test_a_result_whose_columns_come_in_another_order_is_read_by_name_on_postgresql():
    import asyncpg

    from tests.postgres import server_url

    connection = await asyncpg.connect(server_url())
    try:
        result = await connection.fetch(
            "SELECT " + ", ".join(f"${n}::{kind} AS {name}" for n, (name, _, kind) in enumerate(REVERSED_MEMORY, 1)),
            *[value for _, value, _ in REVERSED_MEMORY])
    finally:
        await connection.close()
    assert rows.memories(result) == [EXPECTED]
