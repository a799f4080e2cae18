"""The three memory layers and their rules (SPEC 3-5, 11): the window, saved memories and the
model's tools for them, summaries and their rebuild, drafting, recall by words and by meaning."""
