"""Admin commands run from the shell (`python -m bot characters remove NAME`)."""

from __future__ import annotations

from bot.config import Config
from bot.saved_memories import MAX_PINNED_PER_SCOPE
from storage.sqlite import SQLiteStore


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
