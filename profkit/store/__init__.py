"""Every SQL statement profkit runs lives in this package: ``database`` is profkit's own
SQLite database (runs, their kernel tables and ranges, written through sqlite-utils), and
``nsys_export`` reads Nsight Systems' SQLite exports. No other module imports sqlite3 or
holds SQL: importers and analyses get rows and figures from these classes' methods."""

from .database import DEFAULT_DB, Store, db_path, is_database_error, raw_dir

__all__ = ["DEFAULT_DB", "Store", "db_path", "is_database_error", "raw_dir"]
