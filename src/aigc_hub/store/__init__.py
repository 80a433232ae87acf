"""The store seam: SQLAlchemy Core tables, async engines (SQLite, PostgreSQL), migrations."""
