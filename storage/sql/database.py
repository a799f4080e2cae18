"""The small database interface every port is written against, once for both backends.

SQL uses one placeholder style, `$1, $2, …` (PostgreSQL's; SQLite reads `$1` as a named
parameter, bound by number), and the SQL both backends run: `IS NOT DISTINCT FROM`, `true` and
`false`, `RETURNING`, `ON CONFLICT`, `CAST(… AS BIGINT)`. Rows are read by column name.

What truly differs lives in a `Dialect`: how rows are held until a transaction ends (PostgreSQL
locks them; SQLite's write transaction already holds the whole file), how a list of ids is one
parameter, how writers are serialized on a key, which error a unique key raises, and which a
transaction ended to break a deadlock raises (`in_transaction` runs such a one again).

Outside a transaction `one`, `all` and `value` read and `execute` writes one statement; a
write that returns rows, or several writes that go together, run in `transaction()`.
"""

from __future__ import annotations

import abc
from typing import Any, AsyncContextManager, Awaitable, Callable, Protocol, Sequence, TypeVar

T = TypeVar("T")
DEADLOCK_TRIES = 3  # a transaction ended to break a deadlock runs again, at most this often in all


class Reads(Protocol):
    async def one(self, sql: str, *params: Any) -> Any | None: ...

    async def all(self, sql: str, *params: Any) -> Sequence[Any]: ...

    async def value(self, sql: str, *params: Any) -> Any: ...


class Connection(Reads, Protocol):
    async def execute(self, sql: str, *params: Any) -> int:
        """Run one statement; how many rows it changed."""


class Dialect(abc.ABC):
    for_update: str  # appended to a SELECT whose rows must stay as read until the transaction ends
    for_key_share: str  # appended to a SELECT whose rows must only not go (held as a reference holds them)
    unique_violation: tuple[type[Exception], ...]  # what a unique key refusing a row raises
    deadlock: tuple[type[Exception], ...]  # what a transaction the database ended to break a deadlock raises

    @abc.abstractmethod
    def in_ids(self, number: int) -> str:
        """`IN …` for the list of ids bound as parameter `$number` (see `ids`)."""

    @abc.abstractmethod
    def ids(self, values: Sequence[int]) -> Any:
        """A list of ids as one parameter."""

    @abc.abstractmethod
    async def serialize(self, tx: Connection, key: str) -> None:
        """Make the transaction's writers on `key` take turns, in every process."""


class Database(Connection, Protocol):
    clock: Callable[[], float]
    dialect: Dialect
    # Short reads: a few rows found by key, as a turn's, which SQLite runs inline, on a connection
    # of their own (storage/sqlite/database.py); a long read (recall, an export, the page) is not one.
    short: Reads

    def transaction(self, short: bool = False) -> AsyncContextManager[Connection]:
        """One transaction; rolled back on any error. `short`: a few statements on rows found by
        key, as a turn's, which SQLite runs inline, holding its one writer for their SQL only
        (storage/sqlite/database.py); a long one (/forgetme, an import, the upkeep) is not."""

    async def process_alive(self, holder: str | None) -> bool:
        """Whether the process a holder names is still there (asked of the database, or of the
        operating system for SQLite, which one machine shares)."""


async def in_transaction(db: Database, work: Callable[[Connection], Awaitable[T]], short: bool = False) -> T:
    """`work` in one transaction (`short` as `Database.transaction`), run again from its start when
    the database ended it to break a deadlock. On PostgreSQL two transactions can each wait for a
    row the other holds: /forgetme holds a person's turns and then waits for their row, which a
    memory tool's write holds while it waits to refer to its turn (tests/test_postgres_lock_order.py).
    One of them is ended and the other goes on, so the next try finds the rows as the other left
    them. SQLite's one writer never deadlocks."""
    tries = 1
    while True:
        try:
            async with db.transaction(short) as tx:
                return await work(tx)
        except db.dialect.deadlock:
            if tries == DEADLOCK_TRIES:
                raise
            tries += 1
