"""Every port written once, in SQL both backends run (storage/sql/database.py says how)."""
