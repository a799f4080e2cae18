"""Discord (SPEC section 7): the adapter (adapter.py), its slash commands, buttons and forms
(commands.py), what Discord's objects mean to us (messages.py), and a host bot's characters
speaking through channel webhooks (webhooks.py, SPEC 15)."""
