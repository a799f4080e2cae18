"""Admin commands run from the shell (`python -m bot characters list`, `… remove NAME`). They
need no API key: they never call the model."""

from __future__ import annotations

from bot.config import Config
from bot.saved_memories import MAX_PINNED_PER_SCOPE
from storage.sqlite import SQLiteStore


async def list_characters(config: Config) -> int:
    """The characters of the config and of the database, with their character memories."""
    store = SQLiteStore(config.storage.path)
    await store.open()
    try:
        stored = await store.character_memory_counts()
    finally:
        await store.close()
    configured = {c.name.casefold() for c in config.characters}
    names = [c.name for c in config.characters] + [n for n in stored if n.casefold() not in configured]
    counts = {n.casefold(): count for n, count in stored.items()}
    for name in names:
        where = "in the config" if name.casefold() in configured else "only in the database (removed from the config)"
        memories = counts.get(name.casefold(), 0)
        print(f"{name}: {where}; {memories} character {'memory' if memories == 1 else 'memories'}")
    return 0


async def remove_character(config: Config, name: str) -> int:
    """Delete a character's conversations; its character-scoped memories become global."""
    store = SQLiteStore(config.storage.path)
    await store.open()
    try:
        moved = await store.remove_character(name, pinned_cap=MAX_PINNED_PER_SCOPE)
    finally:
        await store.close()
    if moved is None:
        print(f"There is no character named {name!r} in {config.storage.path}.")
        return 1
    print(f"Removed {name}. {moved} character memories became global memories.")
    if any(c.name.casefold() == name.casefold() for c in config.characters):
        print(f"{name} is still in the config: remove its [[characters]] table too, "
              "or it comes back at the next start.")
    return 0
