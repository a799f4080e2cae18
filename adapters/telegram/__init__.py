"""Telegram (SPEC section 7): the adapter (adapter.py), what Telegram's objects mean to us and how
ours are written in its terms (messages.py), and how updates arrive (transport.py)."""
