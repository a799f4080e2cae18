"""/memory, /link and /forgetme (SPEC section 6): the table, the router and the commands by subject."""

from bot.commands.router import MemoryCommands

__all__ = ["MemoryCommands"]
