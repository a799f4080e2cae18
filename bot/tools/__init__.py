"""What the character can do mid-reply (SPEC 5.1, 18): one toolbox, whose first residents are
the memory tools (bot/memory/tools.py). A tool is one module: a name, a JSON schema, and a run
that gets the turn's scope (bot/tools/toolbox.py)."""
