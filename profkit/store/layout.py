"""The layout of profkit's kernel table as stored: shared by ``database`` (profkit's database)
and ``nsys_import`` (the bulk import of an nsys export)."""

from __future__ import annotations

from ..parse.schema import CLASSIFIED, COLUMNS

KERNEL_COLUMNS: dict[str, type] = {"run_id": int}
for _col, _dtype in {**COLUMNS, **CLASSIFIED}.items():
    KERNEL_COLUMNS[_col] = {"int64": int, "Int64": int, "boolean": int, "object": str}.get(_dtype, str)
# Text columns of the kernel table kept once in ``strings`` and referenced by id (column
# ``<name>_id`` in ``kernel_rows``): a capture repeats the same few thousand names, ranges,
# operators and verdict texts over millions of launches.
INTERNED = ("name", "short_name", "nvtx_range", "nvtx_path", "input_types", "op", "family", "evidence_detail")
STORED_COLUMNS: dict[str, type] = {(f"{c}_id" if c in INTERNED else c): (int if c in INTERNED else t)
                                   for c, t in KERNEL_COLUMNS.items()}
