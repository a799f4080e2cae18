"""Storage: the store interface (base.py), the SQLite implementation and its migrations.

All SQL of the project lives in this package.
"""

from storage.base import Store
from storage.sqlite import SQLiteStore

__all__ = ["Store", "SQLiteStore"]
