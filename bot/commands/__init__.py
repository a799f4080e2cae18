"""/memory, /link and /forgetme (SPEC section 6): the router and the commands by subject."""

from bot.commands.router import HELP, MemoryCommands

__all__ = ["HELP", "MemoryCommands"]
