"""The Python API: what the ``profkit`` command does, as calls that return data.

>>> import profkit
>>> db = profkit.open_db("profkit.db")
>>> run = db.import_file("tests/data/ncu/vgg16_fp16_eager.raw.csv.gz")
>>> run.summary().tensor_core_time_pct                      # a typed Summary
>>> run.kernels().groupby("precision")["duration_ns"].sum()  # the kernel table, a DataFrame

``open_db`` gives a :class:`Database`; its runs are :class:`Run` objects (a stored run's fields,
JSON decoded, plus methods that read its kernel table, summary and ranges). ``profile`` runs a
workload under a profiler, as ``profkit run`` does. Errors are ``profkit.errors.ProfkitError``
subclasses whose messages name these functions' parameters.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from .errors import StoreError
from .parse.schema import KERNEL_FIELDS, RANGE_COLUMNS, RANGE_FIELDS, ClassifiedRow, RangeRow, frame
from .records import RUN_LIST_FIELDS, RunRecord, Summary

if TYPE_CHECKING:
    import pandas as pd

    from .launch import Progress
    from .store import Store

__all__ = ["Database", "Run", "list_workloads", "open_db", "profile"]


@dataclass(frozen=True)
class Run(RunRecord):
    """A stored run: its fields (see :class:`profkit.records.RunRecord`) and its data."""

    db: Database | None = field(default=None, repr=False, compare=False)

    @property
    def database(self) -> Database:
        """The database the run is stored in."""
        if self.db is None:
            raise StoreError(f"run {self.name!r} is not attached to a database", "Get runs from open_db(...).run().")
        return self.db

    def iter_kernels(self) -> Iterator[ClassifiedRow]:
        """The run's kernel-table rows in launch order, streamed: for runs of millions of launches."""
        return self.database.store.iter_kernels(self.id)

    def kernels(self) -> pd.DataFrame:
        """The run's kernel table (``profkit.parse.schema`` documents its columns and dtypes)."""
        return frame(self.iter_kernels(), classified=True)

    def summary(self, top: int = 10) -> Summary:
        """Launches, GPU time, tensor-core share, time by precision and family, top kernels."""
        from .analyze.summary import summarize

        return summarize(self.database.store, self, top=top)

    def range_rows(self) -> list[RangeRow]:
        """The run's ranges as rows (see ``profkit.parse.schema.RangeRow``), in start order."""
        from .analyze.ranges import run_ranges

        return run_ranges(self.database.store, self)

    def ranges(self) -> pd.DataFrame:
        """The run's NVTX / record_function ranges as a DataFrame (``RANGE_FIELDS`` columns)."""
        import pandas as pd

        df = pd.DataFrame(self.range_rows(), columns=list(RANGE_COLUMNS))[list(RANGE_FIELDS)]
        return df.astype({c: "Int64" if RANGE_COLUMNS[c] == "int" else "string" for c in RANGE_FIELDS})

    def count_by_kind(self) -> dict[str, int]:
        """Rows of each kind: kernel, memcpy, memset (timeline tools) or cpu_op."""
        return self.database.store.count_by_kind(self.id)

    @property
    def report_path(self) -> str | None:
        """The raw report profkit kept for the run (.ncu-rep, .nsys-rep or Kineto trace)."""
        return next((self.raw_files[k] for k in ("ncu-rep", "nsys-rep", "kineto-json") if k in self.raw_files), None)


class Database:
    """A profkit database (``profkit.db`` by default). Use :func:`open_db`."""

    def __init__(self, store: Store):
        self.store = store

    @property
    def path(self) -> Path:
        return self.store.path

    def __repr__(self) -> str:
        return f"Database({str(self.path)!r})"

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _attach(self, record: RunRecord) -> Run:
        return Run(**{f.name: getattr(record, f.name) for f in fields(RunRecord)}, db=self)

    def run(self, ref: str | int) -> Run:
        """A run by name or id."""
        return self._attach(self.store.get_run(ref))

    def list_runs(self) -> list[Run]:
        """Every run, oldest first."""
        return [self._attach(r) for r in self.store.runs()]

    def runs(self) -> pd.DataFrame:
        """One row per run (``RUN_LIST_FIELDS`` columns), oldest first."""
        import pandas as pd

        df = pd.DataFrame([{k: getattr(r, k) for k in RUN_LIST_FIELDS} for r in self.store.runs()],
                          columns=list(RUN_LIST_FIELDS))
        ints = {"id", "batch_size", "iters", "kernel_count", "gpu_time_ns"}
        return df.astype({c: "Int64" if c in ints else "string" for c in RUN_LIST_FIELDS})

    def import_file(self, path: str | os.PathLike[str], name: str | None = None) -> Run:
        """Import an export made elsewhere (.ncu-rep, ncu CSV, .nsys-rep/.qdstrm/.sqlite, Kineto
        .json[.gz]) as a new run. A file imported before gives a new run and a ProfkitWarning."""
        from .ingest import import_file

        return self._attach(import_file(self.store, Path(path), name=name))

    def profile(self, workload: str, **options: Any) -> Run:
        """Profile a workload into this database; ``options`` as for :func:`profile`."""
        options.pop("db", None)
        return profile(workload, db=self, **options)


def list_workloads() -> list[tuple[str, str]]:
    """The built-in workloads: (name, one-line description), by name."""
    from .workloads import builtins

    return builtins()


def open_db(path: str | os.PathLike[str] | None = None, create: bool = True) -> Database:
    """Open (or, with ``create``, make) a profkit database. ``path`` defaults to
    ``$PROFKIT_DB``, else ``./profkit.db``."""
    from .store import Store

    return Database(Store(path, create=create))


def profile(
    workload: str,
    *,
    tool: str = "auto",
    precision: str = "fp32",
    mode: str = "eager",
    batch_size: int = 8,
    iters: int = 1,
    warmup: int = 3,
    device: str = "cuda",
    metrics: str | None = None,
    name: str | None = None,
    timeout_s: float | None = None,
    cpu_sampling: bool = False,
    context_switches: bool = False,
    db: Database | str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> Run:
    """Run ``workload`` (a built-in name or a .py file defining ``build(spec)``) under a
    profiler, store its classified kernels as a run and return it: what ``profkit run`` does.

    ``tool`` is auto (ncu where it can read counters, else nsys, else torch), ncu, nsys or
    torch. The options are checked, and the tool chosen, before the database is created.
    """
    from .launch import RunRequest, plan, run
    from .workloads import Spec

    req = RunRequest(workload=workload, spec=Spec(batch_size=batch_size, precision=precision, mode=mode, device=device),
                     tool=tool, iters=iters, warmup=warmup, metrics=metrics, name=name, timeout_s=timeout_s,
                     cpu_sampling=cpu_sampling, context_switches=context_switches)
    checked = plan(req)
    if isinstance(db, Database):
        return db._attach(run(db.store, checked, progress))
    database = open_db(db, create=True)
    try:
        return database._attach(run(database.store, checked, progress))
    except BaseException:
        database.store.discard_if_unused()  # a database this call made, and nothing stored in it
        raise
