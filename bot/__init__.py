"""Keepsake's core: turns, memory layers, prompts, the LLM client and the /memory service.

Nothing in this package imports discord or telegram; adapters/ renders what it returns.
"""
