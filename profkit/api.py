"""The Python API: what the ``profkit`` command does, as calls that return data.

>>> import profkit
>>> db = profkit.open_db("profkit.db")
>>> run = db.import_file("tests/data/ncu/vgg16_fp16_eager.raw.csv.gz")
>>> run.summary().tensor_core_time_pct                      # a typed Summary: % of all GPU time
>>> run.summary().matrix_work.tensor_core_pct               # % of its GEMM, conv and attention time
>>> run.kernels().groupby("precision")["duration_ns"].sum()  # the kernel table, a DataFrame

``open_db`` gives a :class:`Database`; its runs are :class:`Run` objects (a stored run's fields,
JSON decoded, plus methods that read its kernel table, summary and ranges). ``profile`` runs a
workload under a profiler, as ``profkit run`` does. Errors are ``profkit.errors.ProfkitError``
subclasses whose messages name these functions' parameters.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .choices import DEFAULT_MATCH
from .errors import ProfkitError, StoreError, UsageError
from .parse.schema import RANGE_COLUMNS, RANGE_FIELDS, ClassifiedRow, RangeRow, frame
from .records import (
    RUN_LIST_FIELDS,
    ModuleRow,
    ModuleView,
    RankReport,
    RemovedRun,
    RunRecord,
    Summary,
)

if TYPE_CHECKING:
    import pandas as pd

    from .analyze.check import CheckReport, Checks
    from .analyze.diff import Diff
    from .analyze.findings import Finding
    from .cluster import SweepResult
    from .launch import Progress, RunRequest
    from .records import BenchRecord, Tuning
    from .store import Store

__all__ = [
    "Comparison",
    "Database",
    "Run",
    "bench",
    "compare",
    "list_workloads",
    "open_db",
    "profile",
    "sweep",
]


@dataclass(frozen=True)
class Run(RunRecord):
    """A stored run: its fields (see :class:`profkit.records.RunRecord`) and its data."""

    db: Database | None = field(default=None, repr=False, compare=False)

    # ---- in a notebook: one line, or a card with the run's headline figures and top kernels
    def __repr__(self) -> str:
        from .formatting import fmt_ns

        what = " ".join(x for x in (self.workload, self.precision, self.mode) if x)
        where = f"{self.tool or '?'} on {self.gpu_name or self.device or '?'}"
        if self.activity == "cpu_op":
            figures = f"{self.kernel_count:,} CPU operator calls, {fmt_ns(self.gpu_time_ns)} CPU self time"
        else:
            figures = f"{self.kernel_count:,} kernel launches, {fmt_ns(self.gpu_time_ns)} GPU time"
        status = "" if self.status in (None, "ok") else f", {self.status}"
        return f"<Run {self.id} {self.name!r}: {what + ', ' if what else ''}{where}, {figures}{status}>"

    def _repr_html_(self) -> str:
        from .formatting import fmt_ns, html_card

        facts = [
            (
                "workload",
                " ".join(x for x in (self.workload, self.precision, self.mode) if x) or "-",
            ),
            ("tool", f"{self.tool or '?'}{' ' + self.tool_version if self.tool_version else ''}"),
            ("device", self.gpu_name or self.device or "-"),
        ]
        if self.status not in (None, "ok"):
            facts.append(("status", f"{self.status}: {self.info.get('error') or ''}".rstrip(": ")))
        table: dict[str, Any] = {}
        summary = None
        if self.db is not None and self.status in (None, "ok"):
            try:
                summary = self.summary(top=5)
            except ProfkitError:
                summary = None
        if summary is not None:
            facts += summary.headline()
            table = summary.top_table()
        else:
            cpu = self.activity == "cpu_op"
            facts += [
                ("operator calls" if cpu else "kernel launches", f"{self.kernel_count:,}"),
                ("CPU self time" if cpu else "GPU time", fmt_ns(self.gpu_time_ns)),
            ]
        return html_card(f"Run {self.id}", self.name, facts, **table)

    @property
    def database(self) -> Database:
        """The database the run is stored in."""
        if self.db is None:
            raise StoreError(
                f"run {self.name!r} is not attached to a database",
                "Get runs from open_db(...).run().",
            )
        return self.db

    def iter_kernels(self) -> Iterator[ClassifiedRow]:
        """The run's kernel-table rows in launch order, streamed: for runs of millions of launches."""
        return self.database.store.iter_kernels(self.id)

    def iter_kernels_json(self) -> Iterator[str]:
        """The rows of :meth:`iter_kernels` as JSON objects, one text each, made by SQLite:
        what ``profkit kernels --format json`` streams."""
        return self.database.store.iter_kernels_json(self.id)

    def kernels(self) -> pd.DataFrame:
        """The run's kernel table (``profkit.parse.schema`` documents its columns and dtypes)."""
        return frame(self.iter_kernels(), classified=True)

    def summary(self, top: int = 10, module_depth: int = 2) -> Summary:
        """Launches, GPU time, tensor-core share (of all GPU time, and of matrix work:
        ``matrix_work``), time by precision and family, top kernels, and (``modules``) the
        time by module at ``module_depth`` levels of the module tree (see :meth:`modules`)."""
        from .analyze.summary import summarize

        return summarize(self.database.store, self, top=top, module_depth=module_depth)

    def module_view(self, depth: int = 2) -> ModuleView | None:
        """The run's GPU time by module (``profkit.analyze.modules``) as typed rows; None where
        its capture has no module attribution."""
        from .analyze.modules import module_view

        return module_view(self.database.store, self, depth)

    def modules(self, depth: int = 2) -> pd.DataFrame:
        """The run's GPU time by module, one row per module at ``depth`` levels of the module
        tree (a list's index counts with its name: ``model.layers.0`` is two levels), each
        with its submodules' time rolled up into it; most time first. The rows' times add up
        to the run's kernel time: besides modules (``""`` the model's own code) there are
        ``(optimizer)``, ``(outside modules)`` and ``(not attributed)``. Columns, those of
        ``profkit summary``'s by-module table (``profkit.records.ModuleRow``): ``module``,
        ``module_type``, ``launches``, ``time_ns``, ``time_pct`` (of the run's kernel time),
        ``time_by_precision_ns`` and ``time_by_phase_ns`` (dicts: precision or forward /
        backward / optimizer -> ns), ``matrix_time_ns`` (its GEMM, conv and attention time)
        and ``matrix_tensor_core_pct`` (the share of that on tensor cores; <NA> without matrix
        work). A run whose capture has no module attribution raises a UsageError saying how to
        get it."""
        import pandas as pd

        from .analyze.modules import no_attribution

        view = self.module_view(depth)
        if view is None:
            raise UsageError(no_attribution(self))
        cols = list(ModuleRow.__dataclass_fields__)
        df = pd.DataFrame([asdict(r) for r in view.rows], columns=cols)
        return df.astype(
            {
                "module": "string",
                "module_type": "string",
                "launches": "Int64",
                "time_ns": "Int64",
                "time_pct": "float64",
                "matrix_time_ns": "Int64",
                "matrix_tensor_core_pct": "Float64",
            }
        )

    def ranks(self) -> RankReport | None:
        """A distributed run's ranks side by side (``--nproc-per-node``): per rank its GPU time
        and NCCL time with the share that overlapped compute, each iteration's skew and who
        waited for whom, and how the ranks' kernels differ. None for a single process."""
        from .analyze.ranks import rank_report

        return rank_report(self.database.store, self)

    def range_rows(self) -> list[RangeRow]:
        """The run's ranges as rows (see ``profkit.parse.schema.RangeRow``), in start order."""
        from .analyze.ranges import run_ranges

        return run_ranges(self.database.store, self)

    def ranges(self) -> pd.DataFrame:
        """The run's NVTX / record_function ranges as a DataFrame (``RANGE_FIELDS`` columns)."""
        import pandas as pd

        df = pd.DataFrame(self.range_rows(), columns=list(RANGE_COLUMNS))[list(RANGE_FIELDS)]
        return df.astype(
            {c: "Int64" if RANGE_COLUMNS[c] == "int" else "string" for c in RANGE_FIELDS}
        )

    def diff(
        self, other: RunRecord, match: str = DEFAULT_MATCH.value, threshold_pct: float = 10.0
    ) -> Diff:
        """This run (A) against ``other`` (B): each kernel (``match`` exact), kind of work
        (family) or launching operator (op) on both sides, with status and deltas, and the
        headline totals. See ``profkit.analyze.diff``."""
        from .analyze.diff import diff

        self._same_database(other)
        return diff(self.database.store, self, other, match=match, threshold_pct=threshold_pct)

    def _same_database(self, other: RunRecord) -> None:
        """Refuse ``other`` if it is a run of another database: its ids mean nothing in this one."""
        if (
            isinstance(other, Run)
            and other.db is not None
            and other.db.path.resolve() != self.database.path.resolve()
        ):
            raise UsageError(
                f"{self.name} and {other.name} are in two databases ({self.database.path}, {other.db.path})",
                "Import both captures into one database to diff them.",
            )

    def caveats(self) -> dict[str, str]:
        """What the run's figures do not show by themselves, as the report prints them: work
        captured outside the measured iterations (``headline``), other threads' kernels while its
        ranges were open (``ranges``)."""
        from .analyze.ranges import caveats

        return caveats(self.database.store, self)

    def findings(self) -> list[Finding]:
        """What a performance engineer would point out (rules with thresholds in rules.toml):
        half-precision work off the tensor cores, fp32 kernels in a half run, layout
        conversions, fusable kernels, a launch-bound timeline, autograd's thread."""
        from .analyze.findings import findings

        return findings(self.database.store, self)

    def tune(
        self,
        *,
        workload: str | None = None,
        iters: int | None = None,
        warmup: int | None = None,
        timeout_s: float | None = None,
        rounds: int = 1,
        progress: Progress | None = None,
    ) -> Tuning:
        """Try the fixes this run's findings and settings call for on its own workload or program,
        time each against the run's setting, check outputs, rank them and store the tuning with
        the run (see :mod:`profkit.tuning`). ``iters``/``warmup``: each trial's timed and warm-up
        steps (default: 20 and 5 on a GPU, 5 and 2 on the CPU); ``rounds``: the processes the
        baseline and each fix are timed in, a round of them after another (default 1), so that
        what changes between processes counts in every spread; ``workload``: the file a run of a
        workload file came from (a built-in's run needs none)."""
        from . import tuning

        store = self.database.store
        checked = tuning.plan(
            store,
            self,
            workload=workload,
            iters=iters,
            warmup=warmup,
            timeout_s=timeout_s,
            rounds=rounds,
        )
        return tuning.run(store, checked, progress)

    def tunings(self) -> list[Tuning]:
        """This run's stored tunings (``profkit tune``), oldest first."""
        return self.database.store.tunings(self.id, self.name)

    def latest_tuning(self) -> Tuning | None:
        """This run's latest tuning (``profkit tune``); None where it has none."""
        return self.database.store.latest_tuning(self.id, self.name)

    def check(
        self,
        config: Checks | str | os.PathLike[str] | None = None,
        baseline: Run | str | int | None = None,
        **limits: Any,
    ) -> CheckReport:
        """Assertions over this run, as ``profkit check`` makes them: ``config`` a check file's
        path or a ``Checks``, ``limits`` its fields over it (``min_coverage=95``,
        ``no_fp32_matrix=True``, ``max_findings={"fusable_kernels": 60}``, ``max_slowdown=5``,
        ``noise_pct``, ``max_launches=200``, ``max_untried_gain_pct=10``); ``baseline`` the run
        the slowdown is measured against (a Run, or a name or id in this database). See
        ``profkit.analyze.check``."""
        from .analyze.check import Checks, load_checks, run_checks

        known = [f.name for f in fields(Checks) if f.name != "baseline"]
        for key in limits:
            if key not in known:
                import difflib

                near = difflib.get_close_matches(key, known, n=1)
                raise UsageError(
                    f"unknown check {key!r}",
                    f"Did you mean {near[0]}?" if near else f"The checks are {', '.join(known)}.",
                )
        base = (
            config
            if isinstance(config, Checks)
            else load_checks(config)
            if config is not None
            else Checks()
        )
        checks = base.merged(Checks(**limits))
        if isinstance(baseline, (str, int)):
            baseline = self.database.run(baseline)
        elif baseline is None and checks.baseline is not None:
            baseline = self.database.run(checks.baseline)
        if baseline is not None:
            self._same_database(baseline)
            checks = Checks(
                **{
                    **{f.name: getattr(checks, f.name) for f in fields(Checks)},
                    "baseline": baseline.name,
                }
            )
        return run_checks(self.database.store, self, checks.check(), baseline)

    def report(
        self,
        output: str | os.PathLike[str] | None = None,
        vs: Run | str | int | None = None,
        match: str = DEFAULT_MATCH.value,
        threshold_pct: float = 10.0,
    ) -> Path:
        """Write this run's self-contained HTML report (``reports/<name>.html`` unless
        ``output``); with ``vs`` (a Run, or a name or id in this database), the two runs side by
        side with their diff (``reports/vs/<name>+<other>.html``). Returns its path."""
        from .report import write_report

        other = self.database.run(vs) if isinstance(vs, (str, int)) else vs
        if other is not None:
            self._same_database(other)  # as diff does
        return write_report(
            self.database.store,
            self,
            None if output is None else Path(output),
            other,
            match,
            threshold_pct,
        )

    def count_by_kind(self) -> dict[str, int]:
        """Rows of each kind: kernel, memcpy, memset (timeline tools) or cpu_op."""
        return self.database.store.count_by_kind(self.id)

    @property
    def report_path(self) -> str | None:
        """The raw report profkit kept for the run (.ncu-rep, .nsys-rep or Kineto trace)."""
        return next(
            (
                self.raw_files[k]
                for k in ("ncu-rep", "nsys-rep", "kineto-json")
                if k in self.raw_files
            ),
            None,
        )


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

    def run(self, ref: str | int, complete: bool = True) -> Run:
        """A run by name or id. Unless ``complete`` is False, a run that failed, was
        interrupted or is still being written raises RunIncomplete (it has no kernels)."""
        record = self.store.get_run(ref)
        if complete and record.status not in (None, "ok"):
            from .errors import RunIncomplete

            why = record.info.error
            raise RunIncomplete(
                f"run {record.name!r} is {record.status}{': ' + why if why else ''}",
                f"It has no kernels; its files are in {self.store.run_folder(record)}."
                if record.source == "run"
                else "It has no kernels yet.",
            )
        return self._attach(record)

    def list_runs(self) -> list[Run]:
        """Every run, oldest first."""
        return [self._attach(r) for r in self.store.runs()]

    def runs(self) -> pd.DataFrame:
        """One row per run (``RUN_LIST_FIELDS`` columns), oldest first."""
        import pandas as pd

        df = pd.DataFrame(
            [{k: getattr(r, k) for k in RUN_LIST_FIELDS} for r in self.store.runs()],
            columns=list(RUN_LIST_FIELDS),
        )
        ints = {"id", "batch_size", "iters", "kernel_count", "gpu_time_ns"}
        return df.astype({c: "Int64" if c in ints else "string" for c in RUN_LIST_FIELDS})

    def remove(self, run: Run | str | int) -> RemovedRun:
        """Delete ``run`` (a Run of this database, or a name or id) for good: its row, every row of
        it (kernels, their aggregates, ranges, host syncs, the ncu counters read from it) and its
        folder of raw files in ``<db stem>-runs/`` (the one made for it; a file imported in place
        is left where it is, and no report written elsewhere is touched). Its name is free again;
        its id is never given again. Complete, failed and interrupted runs alike; RunNotFound if
        there is no such run, and a StoreError, before anything is deleted, for a run still being
        written or a raw folder that is not the one profkit made for it."""
        if isinstance(run, Run):
            self._own(run)
            ref: str | int = run.id
        else:
            ref = run
        record, folder = self.store.remove_run(ref)
        return RemovedRun(record, None if folder is None else str(folder))

    def _own(self, run: Run) -> None:
        """Refuse a Run of another database: its id means another run in this one."""
        if run.db is not None and run.db.path.resolve() != self.path.resolve():
            raise UsageError(
                f"run {run.name!r} is in another database ({run.db.path}), not {self.path}"
            )

    def import_file(
        self, path: str | os.PathLike[str], name: str | None = None, step_ranges: Sequence[str] = ()
    ) -> Run:
        """Import an export made elsewhere as a new run: any format of ``profkit.parse.FORMATS``
        (``profkit import --help`` lists them), known by its suffix. A file imported before
        gives a new run and a ProfkitWarning. Steps are torch.profiler's ``ProfilerStep#N``
        ranges and profkit's own; ``step_ranges`` names others (a user's or a framework's NVTX
        or record_function ranges, one per step), each then the process's: every thread's work
        in it is the step's."""
        from .ingest import import_file

        if isinstance(step_ranges, str):
            step_ranges = [step_ranges]
        return self._attach(
            import_file(self.store, Path(path), name=name, step_ranges=list(step_ranges))
        )

    def import_ranks(
        self,
        paths: Sequence[str | os.PathLike[str]],
        name: str | None = None,
        step_ranges: Sequence[str] = (),
    ) -> Run:
        """Import one torch.profiler trace per rank of a distributed job, in rank order (each
        rank profiled on its own: ``profkit run -- ...`` inside torchrun or srun), as one run
        with a rank on every row."""
        from .ingest import import_ranks

        if isinstance(step_ranges, str):
            step_ranges = [step_ranges]
        return self._attach(
            import_ranks(
                self.store, [Path(p) for p in paths], name=name, step_ranges=list(step_ranges)
            )
        )

    def diff(
        self,
        a: str | int,
        b: str | int,
        match: str = DEFAULT_MATCH.value,
        threshold_pct: float = 10.0,
    ) -> Diff:
        """Run ``a`` against run ``b`` (names or ids); see :meth:`Run.diff`."""
        return self.run(a).diff(self.run(b), match=match, threshold_pct=threshold_pct)

    def write_index(self, output: str | os.PathLike[str] | None = None) -> Path:
        """Write the index page (``reports/index.html`` unless ``output``) linking every run's
        report in its folder, (re)writing the run pages that are missing or stale; return its path."""
        from .report import write_index

        return write_index(self.store, None if output is None else Path(output))

    def profile(self, workload: str, **options: Any) -> Run:
        """Profile a workload into this database; ``options`` as for :func:`profile`."""
        options.pop("db", None)
        return profile(workload, db=self, **options)

    # ------------------------------------------------------------------ benchmarks (profkit bench)
    def benches(self) -> list[BenchRecord]:
        """Every stored benchmark (see :func:`bench`) with its rows, oldest first."""
        return self.store.benches()

    def bench(self, bench_id: int | str) -> BenchRecord:
        """A stored benchmark by id; BenchNotFound if there is none."""
        return self.store.get_bench(bench_id)


@dataclass(frozen=True)
class VariantRow:
    """One variant of a :class:`Comparison`: its figures, and (but for the first) how its
    kernel rows moved against the first's."""

    variant: str  # "fp16 eager": what differs between the variants
    run: str  # its run's name
    kernels: float  # launches (per iteration where both sides have iterations)
    gpu_time_ns: float
    tensor_core_time_pct: float  # of all GPU time
    by_precision: str  # "fp16 80%, fp32 20%"
    added: int | None  # rows against the first variant (None for the first)
    removed: int | None
    changed: int | None
    fused_kernels: int | None  # kernels torch.compile fused away or into others
    # tensor-core coverage of matrix work (GEMM, conv, attention; profkit.analyze.matrix): the
    # share of that time on tensor cores (None without matrix work, or for CPU operators), the
    # time, and the part of it whose tensor-core use is unknown (None for CPU operators)
    matrix_tensor_core_pct: float | None = None
    matrix_time_ns: float | None = None
    matrix_undecided_time_ns: float | None = None


@dataclass(frozen=True)
class Comparison:
    """Variants of one workload, profiled, and each diffed against the first."""

    workload: str
    match: str
    labels: list[str]  # "fp16 eager", ... (what differs between the variants)
    runs: list[Run]
    diffs: list[Diff]  # runs[i + 1] against runs[0]

    def variant_rows(self) -> list[VariantRow]:
        """One row per variant: its run, launches, GPU time, tensor-core share (of all GPU time
        and of matrix work), and the counts
        of rows added, removed and changed against the first (per iteration where it matters)."""
        out = []
        for i, (label, r) in enumerate(zip(self.labels, self.runs)):
            # Every figure from the diffs' totals (the first variant is their side A), so that
            # all of a row's figures count the same kernels.
            t = self.diffs[max(0, i - 1)].totals
            side = t.side("b" if i else "a")
            total = side.gpu_time_ns
            out.append(
                VariantRow(
                    variant=label,
                    run=r.name,
                    kernels=side.kernels,
                    gpu_time_ns=total,
                    tensor_core_time_pct=side.tensor_core_time_pct,
                    by_precision=", ".join(
                        f"{p} {100 * v / total:.0f}%"
                        for p, v in side.time_by_precision_ns.items()
                        if total and v
                    )
                    or "-",
                    added=t.status.added if i else None,
                    removed=t.status.removed if i else None,
                    changed=t.status.changed if i else None,
                    fused_kernels=len(t.fused_kernels) if i else None,
                    matrix_tensor_core_pct=side.matrix_work.tensor_core_pct
                    if side.matrix_work
                    else None,
                    matrix_time_ns=side.matrix_work.time_ns if side.matrix_work else None,
                    matrix_undecided_time_ns=side.matrix_work.undecided_time_ns
                    if side.matrix_work
                    else None,
                )
            )
        return out

    def write_reports(self, folder: str | os.PathLike[str] = "reports") -> list[Path]:
        """Each variant side by side with the first (``<folder>/vs/<first>+<other>.html``),
        matched as the comparison was; returns the paths."""
        from .report import write_report

        first = self.runs[0]
        return [
            write_report(
                first.database.store,
                first,
                vs=r,
                match=self.match,
                threshold_pct=self.diffs[0].threshold_pct,
                folder=Path(folder),
            )
            for r in self.runs[1:]
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "match": self.match,
            "variants": [asdict(v) for v in self.variant_rows()],
            "diffs": [d.to_dict() for d in self.diffs],
        }

    # ---- in a notebook: one line, or a card with a row per variant
    def __repr__(self) -> str:
        from .formatting import fmt_ns

        figures = ", ".join(f"{v.variant} {fmt_ns(v.gpu_time_ns)}" for v in self.variant_rows())
        return f"<Comparison of {self.workload} ({len(self.runs)} variants, match {self.match}): {figures}>"

    def _repr_html_(self) -> str:
        from .formatting import fmt_ns, html_card, pct

        cpu = bool(self.runs) and self.runs[0].activity == "cpu_op"
        columns = (
            [
                "variant",
                "run",
                "calls" if cpu else "launches",
                "CPU self time" if cpu else "GPU time",
            ]
            + ([] if cpu else ["tensor cores, of matrix work"])
            + ["by precision", "added", "removed", "changed"]
        )
        rows = [
            [v.variant, v.run, f"{v.kernels:,.0f}", fmt_ns(v.gpu_time_ns)]
            + ([] if cpu else [pct(v.matrix_tensor_core_pct)])
            + [v.by_precision]
            + ["-" if x is None else str(x) for x in (v.added, v.removed, v.changed)]
            for v in self.variant_rows()
        ]
        numeric = {2, 3} | ({4} if not cpu else set()) | set(range(len(columns) - 3, len(columns)))
        return html_card(
            "Comparison of",
            self.workload,
            [("match", self.match), ("variants", str(len(self.runs)))],
            columns,
            rows,
            caption="each variant against the first",
            numeric=numeric,
        )


def compare(
    workload: str,
    *,
    modes: str | Sequence[str] = ("eager",),
    precisions: str | Sequence[str] = ("fp32",),
    match: str = DEFAULT_MATCH.value,
    threshold_pct: float = 10.0,
    db: Database | str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    **options: Any,
) -> Comparison:
    """Profile every (precision, mode) variant of ``workload`` and diff each against the first:
    what ``profkit compare`` does. ``options`` are :func:`profile`'s (tool, batch_size, ...).
    Every variant's options are checked before the first is profiled."""
    from .launch import check, plan

    variants = _variants(workload, modes, precisions, match, options)
    # every variant's options first, then the tool: all before anything runs
    for (
        req,
        _,
    ) in variants:
        check(req)
    plan(variants[0][0])
    database = db if isinstance(db, Database) else open_db(db, create=True)
    runs: list[Run] = []
    # (A new database file is made only when the first variant stores its run.)
    for req, label in variants:
        if progress:
            progress.note(
                f"variant {label}: profiling {workload} in {req.options.precision}, {req.options.mode}"
            )
        runs.append(_profile(req, database, progress))
    diffs = [runs[0].diff(r, match=match, threshold_pct=threshold_pct) for r in runs[1:]]
    return Comparison(workload, match, [label for _, label in variants], runs, diffs)


def _variants(
    workload: str,
    modes: str | Sequence[str],
    precisions: str | Sequence[str],
    match: str,
    options: dict[str, Any],
) -> list[tuple[RunRequest, str]]:
    """A comparison's variants (precisions outer, modes inner), each a request with its label
    ("fp16 eager": what differs between the variants), refused in one line where the asked
    combination cannot be compared."""
    from .analyze.diff import MATCHES
    from .errors import require_choice
    from .launch import RunRequest
    from .options import RunOptions

    mode_list = modes.split(",") if isinstance(modes, str) else list(modes or ())
    precision_list = (
        precisions.split(",") if isinstance(precisions, str) else list(precisions or ())
    )
    if not mode_list or not precision_list:
        raise UsageError("`modes` and `precisions` each need at least one value")
    require_choice("match", match, MATCHES)
    if "name" in options or "mode" in options or "precision" in options:
        raise UsageError(
            "compare names its runs and sets each variant's `mode` and `precision` itself; "
            "give `modes` and `precisions`"
        )
    pairs = [(p, m) for p in dict.fromkeys(precision_list) for m in dict.fromkeys(mode_list)]
    if len(pairs) < 2:
        raise UsageError(
            "compare needs at least two variants: give two `modes` or two `precisions`"
        )
    base = RunOptions.make(**options)
    base.check_values()
    base.check_grid(precision_list, mode_list)
    if match == "op" and base.tool != "torch" and base.device != "cpu":
        raise UsageError(
            "`match` op lines kernels up by the operators that launched them, which only torch.profiler "
            "records",
            "Use `tool` torch, or match exact or family.",
        )
    if match == "module":
        off = base.attribution is False or (
            base.attribution is None and base.tool in ("nsys", "torch")
        )
        why = (
            "attribution is turned off"
            if off
            else "a compiled model's kernels carry the operators Inductor fused, not modules"
            if "compile" in mode_list
            else None
        )
        if why:
            raise UsageError(
                f"`match` module lines kernels up by the module that launched them, and {why}",
                "Compare eager runs with attribution (on by default under ncu, `attribution` under nsys "
                "and torch), or match exact, family or op.",
            )
    labels = [
        " ".join(
            x
            for x, many in ((p, len(set(precision_list)) > 1), (m, len(set(mode_list)) > 1))
            if many
        )
        for p, m in pairs
    ]
    return [(RunRequest(workload, base.cell(p, m)), label) for (p, m), label in zip(pairs, labels)]


def list_workloads() -> list[tuple[str, str]]:
    """The built-in workloads: (name, one-line description), by name."""
    from .workloads import builtins

    return builtins()


def _writable(db: Database | str | os.PathLike[str] | None) -> Database:
    """``db`` opened (or made), refused before anything runs if it cannot be written."""
    database = db if isinstance(db, Database) else open_db(db, create=True)
    database.store.check_writable()
    return database


def open_db(path: str | os.PathLike[str] | None = None, create: bool = True) -> Database:
    """Open (or, with ``create``, make) a profkit database. ``path`` defaults to
    ``$PROFKIT_DB``, else ``./profkit.db``."""
    from .store import Store

    return Database(Store(path, create=create))


def profile(
    workload: str | None = None,
    *,
    program: Sequence[str] | None = None,
    db: Database | str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    **options: Any,
) -> Run:
    """Run ``workload`` (a built-in name or a .py file defining ``build(spec)``) under a
    profiler, store its classified kernels as a run and return it: what ``profkit run`` does.

    Or run a user's ``program`` as it is, its command line as ``profkit run -- ...`` takes it
    (``["python", "train.py", "--epochs", "1"]``, ``["train.py"]``, ``["python", "-m",
    "pkg.train"]``), in the current folder: its steps are found as it runs (``step``: auto,
    optimizer, optimizer:CLASS, forward, forward:CLASS, backward, marker), ``warmup`` steps run
    unprofiled, the next ``iters`` are profiled, and the program is stopped there unless
    ``run_to_end``. The workload options (precision, mode, batch size...) do not apply to it.

    ``options`` are :class:`profkit.options.RunOptions`' fields, each with ``profkit run``'s
    default: ``tool`` auto (ncu where it can read counters, else nsys, else torch), ncu, nsys
    or torch; ``precision`` fp32, fp16, bf16 or amp; ``mode`` eager, torchscript or compile
    (torch.compile with ``compile_mode``, compiled in the warm-up); ``batch_size`` 8;
    ``iters`` 1; ``warmup`` 3; ``device`` cuda or cpu; ``keep_bn_fp32`` (fp16/bf16) puts
    BatchNorm layers back in fp32 after the cast; ``channels_last`` lays the model and its
    4-D inputs out channels-last; ``cudnn_benchmark`` lets cuDNN time its algorithms (in the
    warm-up); ``metrics`` (ncu), ``name``, ``timeout_s``, ``cpu_sampling`` and
    ``context_switches`` (nsys). The options are checked, and the tool chosen, before the
    database is created; an unknown option is a UsageError.

    ``nproc_per_node`` N > 1 runs the workload as N ranks of a distributed job (torchrun, one
    GPU each; gloo on the CPU) under nsys or torch: one run, a ``rank`` on every kernel row
    and range; its summary has per-rank figures (``Summary.ranks``).
    """
    from .launch import RunRequest
    from .options import RunOptions

    if (workload is None) == (program is None):
        raise UsageError(
            "profile a `workload` or a `program`: one of them"
            if workload is None
            else "give a `workload` or a `program`, not both"
        )
    if program is not None:
        from .program import resolve

        if isinstance(program, str):
            raise UsageError(
                '`program` is a command line as a list of strings: ["python", "train.py", ...]'
            )
        return _profile(
            RunRequest("", RunOptions.make(**options), program=resolve(list(program), Path.cwd())),
            db,
            progress,
        )
    assert workload is not None
    return _profile(RunRequest(workload, RunOptions.make(**options)), db, progress)


def _profile(
    req: RunRequest, db: Database | str | os.PathLike[str] | None, progress: Progress | None
) -> Run:
    from .launch import plan, run

    checked = plan(req)
    # the file is made when the run is reserved
    database = db if isinstance(db, Database) else open_db(db, create=True)
    return database._attach(run(database.store, checked, progress))


# ---------------------------------------------------------------------------------- bench
def bench(
    workload: str,
    *,
    precisions: str | Sequence[str] = ("fp32",),
    modes: str | Sequence[str] = ("eager",),
    db: Database | str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    rounds: int = 1,
    **options: Any,
) -> BenchRecord:
    """Time ``workload`` in every combination of ``precisions`` x ``modes``, each in its own
    process, and store the benchmark: what ``profkit bench`` does. ``options`` are the run
    options a benchmark takes (``profkit.options``): ``batch_size``, ``iters`` and ``warmup``
    (left out: ``profkit.options.BENCH_DEFAULTS`` for the device), ``device``, ``timeout_s`` (stops one
    combination's process), ``keep_bn_fp32`` (in the fp16 and bf16 combinations),
    ``channels_last`` and ``cudnn_benchmark``. Returns a :class:`profkit.records.BenchRecord`
    whose rows give, per combination, the median and spread of the ``iters`` iterations after
    ``warmup`` (CUDA events on a GPU), items per second, peak GPU memory and, for workloads
    that build ``(model, inputs)``, how the output agrees with fp32 eager's (max abs diff,
    top-1). The options, the workload, the machine and the database are checked before
    anything runs; a combination that fails at run time is a row with status failed and its
    error (``record.ok`` is then False). Nothing is stored unless every combination has ended.
    ``rounds`` (default 1) times each combination in that many processes, a round of them after
    another: its figures pool every process's steps, so that what changes between processes is
    in its spread (each process's median: ``record.info["round_medians_ms"]``).
    """
    from .benchmark import plan, run

    checked = plan(workload, precisions=precisions, modes=modes, rounds=rounds, **options)
    return run(_writable(db).store, checked, progress)


def tune(
    workload: str | None = None,
    *,
    program: Sequence[str] | None = None,
    run: Run | str | int | None = None,
    db: Database | str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    rounds: int = 1,
    **options: Any,
) -> Tuning:
    """What ``profkit tune`` does: profile ``workload`` or ``program`` as :func:`profile` does
    (or start from a stored ``run``), then try the fixes its findings and settings call for,
    time each against the run's own setting, check that outputs agree, rank them by the time
    they save and store the tuning with the run. ``options``: the run options (``precision``,
    ``mode``, ``batch_size``, ``device``, ``tool``, ...) for the first profile; ``iters`` and
    ``warmup`` are each trial's timed and warm-up steps, ``timeout_s`` stops the profiler and
    each trial; the profile records attribution under every tool unless ``attribution=False``;
    ``rounds`` (default 1) times the baseline and each fix in that many processes,
    a round of them after another. Returns a :class:`profkit.records.Tuning` (``.best``: the measured fix that
    saves most with outputs that agree)."""
    from . import benchmark, tuning
    from .options import TUNE, require_command_options

    require_command_options(TUNE, options)
    iters, warmup = options.pop("iters", None), options.pop("warmup", None)
    timeout_s = options.get("timeout_s")
    if run is not None:
        if program is not None or options.keys() - {"timeout_s"}:
            raise UsageError(
                "`run` starts from a stored run: give no program and no run options but iters, "
                "warmup and timeout_s"
            )
        database = _writable(db)
        stored = run if isinstance(run, Run) else database.run(run)
        return stored.tune(
            workload=workload,
            iters=iters,
            warmup=warmup,
            timeout_s=timeout_s,
            rounds=rounds,
            progress=progress,
        )
    database = _writable(db)
    benchmark.check_rounds(rounds)  # before the profile, which takes minutes
    # Attribution whatever the tool, unless asked otherwise: the findings that name operators
    # and shapes (unfused attention, misaligned shapes) call for fixes, and tune times each fix
    # in processes of its own, which the ranges' host cost never reaches.
    if options.get("attribution") is None:
        options["attribution"] = True
    profiled = profile(workload, program=program, db=database, progress=progress, **options)
    checked = tuning.plan(
        database.store,
        profiled,
        iters=iters,
        warmup=warmup,
        timeout_s=timeout_s,
        workload=workload,
        rounds=rounds,
    )
    return tuning.run(database.store, checked, progress)


def sweep(
    workloads: str | Sequence[str],
    *,
    precisions: str | Sequence[str] = ("fp32",),
    modes: str | Sequence[str] = ("eager",),
    tools: str | Sequence[str] = ("auto",),
    address: str | None = None,
    workers: int | None = None,
    tls_ca_file: str | os.PathLike[str] | None = None,
    tls_cert: str | os.PathLike[str] | None = None,
    tls_key: str | os.PathLike[str] | None = None,
    db: Database | str | os.PathLike[str] | None = None,
    on_result: Callable[[Any, int, int], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    **options: Any,
) -> SweepResult:
    """Profile every cell of ``workloads`` x ``precisions`` x ``modes`` x ``tools`` (one
    :func:`profile` each) on Dask: a local cluster with one worker per GPU, or the scheduler at
    ``address`` (a ``tls://`` one reached with ``tls_ca_file``, ``tls_cert`` and ``tls_key``, else
    with Dask's own TLS settings); without Dask installed, one after another here. ``options`` are every job's:
    :func:`profile`'s, but ``precision``, ``mode``, ``tool`` and ``name`` (the matrix and the
    sweep set those) and ``nproc_per_node`` (a job is one process on one GPU); each goes to
    the cells it applies to (``compile_mode`` to the compile cells, ``metrics`` to the ncu
    cells, ...). Every run is stored in ``db`` by this process as it finishes; a failed job is
    a failed run with its error and logs, and the others go on. Cells a workload does not
    support are skipped (in the result, with why). ``on_result(result, done, total)`` is
    called as each job ends. Returns a :class:`profkit.cluster.SweepResult`."""
    from .cluster import INSTALL_HINT, _dask, plan, run, skip_auto_twins, tls_security
    from .errors import require_int

    if workers is not None:
        require_int("workers", workers, 1)
        if address:
            raise UsageError(
                "`workers` sizes the local cluster; with `address` the scheduler's own workers run the "
                "jobs",
                "Leave out `workers`, or `address` to run on this machine.",
            )
    if address and _dask() is None:
        raise UsageError(
            "`address` hands the jobs to a Dask scheduler, and Dask is not installed",
            f"Install it: {INSTALL_HINT}",
        )
    security = tls_security(address, tls_ca_file, tls_cert, tls_key)
    checked = plan(workloads, precisions, modes, tools, options)
    if address is None:  # the jobs run on this machine: its GPUs and tools, checked first
        from .gpu import count
        from .launch import plan as plan_run

        if checked.device == "cuda" and not count():
            raise UsageError(
                "`device` cuda, but this machine shows no GPU (nvidia-smi -L)",
                "Use `device` cpu, or give a scheduler `address`.",
            )
        tools_chosen = [plan_run(req).tool for _, req, _ in checked.jobs]
        skip_auto_twins(checked, tools_chosen)
    return run(
        _writable(db).store,
        checked,
        address=address,
        workers=workers,
        security=security,
        on_result=on_result,
        on_note=on_note,
    )
