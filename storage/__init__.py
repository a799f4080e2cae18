"""Storage: all SQL of the project. `ports.py` says what the core may ask (small interfaces by
kind of data), `factory.open_store(url)` opens a backend; each backend is a package of its own
(`sqlite/`) with its migrations, and one contract suite (`tests/storage_contract/`) tests them.
"""
