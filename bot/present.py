"""Who is here: the adapters of this process that registered for something while they run
(notifications, check-ins, a scene's voices)."""

from __future__ import annotations

import contextlib
from typing import Generic, Iterator, TypeVar

T = TypeVar("T")


class Present(Generic[T]):
    """Members present while their `with present.joined(member):` block runs."""

    def __init__(self) -> None:
        self.members: list[T] = []

    def __len__(self) -> int:
        return len(self.members)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self.members))

    @contextlib.contextmanager
    def joined(self, member: T) -> Iterator[None]:
        self.members.append(member)
        try:
            yield
        finally:
            self.members.remove(member)
