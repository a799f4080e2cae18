"""What a character writes first, unasked: check-ins (SPEC 14) and, next, reminders (SPEC 19),
each a source of the one outbox (outbox.py) that claims, gates, stores, sends and takes back."""
