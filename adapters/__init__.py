"""Adapters: turn platform events into IncomingMessage and render Reply / CommandResult.

They never build prompts and never touch SQL.
"""
