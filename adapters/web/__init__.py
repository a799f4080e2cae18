"""The memory page over HTTP (SPEC 21): aiohttp serves, Jinja2 renders with autoescape; what is
shown and changed is the core's (`core.page`, bot/contract.py MemoryPage)."""
