"""Rows are read by column name into the row types of storage/ports.py: each column list must
name its type's fields, in their order."""

from dataclasses import fields

import pytest

from storage import rows
from storage.ports import ConversationRow, MemoryRow, MessageRow, RebuildRow, SummaryRow, TurnRow


@pytest.mark.parametrize("listed, kind", [
    (rows.MEMORY_COLUMNS, MemoryRow), (rows.MESSAGE_COLUMNS, MessageRow), (rows.TURN_COLUMNS, TurnRow),
    (rows.CONVERSATION_COLUMNS, ConversationRow), (rows.SUMMARY_COLUMNS, SummaryRow),
    (rows.REBUILD_COLUMNS, RebuildRow),
])
def test_each_column_list_names_its_row_types_fields_in_order(listed, kind):
    assert rows.names(listed) == tuple(field.name for field in fields(kind))
