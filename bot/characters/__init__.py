"""The characters: cards in every format, their lorebooks, and the Cast a process runs (stored
ids, conversation and person lookups)."""
