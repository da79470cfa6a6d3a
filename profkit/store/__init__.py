"""Every SQL statement on profkit's own database lives in this package: ``database`` is
profkit's SQLite database (``Store``: runs, their kernel tables and ranges, written through
sqlite-utils), made of one module per concern: ``connection`` (the file, WAL, write
transactions), ``migrations`` (the layout as named, ordered steps recorded in the database),
``runs`` (a run's life), ``writes`` (kernel rows in bulk, a run's aggregates),
``fine_aggregates`` (the launches grouped finely, what the aggregates are made from),
``queries`` (what the analyses read), ``counters`` (ncu's counters kept across runs) and
``benches``; ``layout`` holds every table's stored columns, and ``nsys_import`` the
bulk import of an Nsight Systems export (ATTACHed read-only). The one other database profkit
reads, an nsys export, has its reader with the parsers (``profkit.parse.nsys_export``). No
other module imports sqlite3 or holds SQL: importers and analyses get rows and figures from
``Store``'s methods."""

from .database import DEFAULT_DB, Store, db_path, is_database_error, raw_dir, read_failure

__all__ = ["DEFAULT_DB", "Store", "db_path", "is_database_error", "raw_dir", "read_failure"]
