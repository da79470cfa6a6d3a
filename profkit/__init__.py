"""profkit: run a PyTorch workload under a GPU profiler, keep one kernel table per run, and say
for every kernel which precision it ran in and whether it used the tensor cores.

The library is the product; ``profkit.cli`` is a thin shell over it::

    import profkit
    db = profkit.open_db()                 # ./profkit.db, or $PROFKIT_DB
    run = db.run("vgg16-fp16-eager-ncu")   # or db.import_file(...), or profkit.profile("vgg16", ...)
    run.summary(); run.kernels(); run.ranges()

Importing this package stays cheap (no torch, no pandas, nothing but these names, loaded when
first used) so that ``profkit --help`` is instant.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .version import __version__

# Public name -> module that defines it, imported on first use (PEP 562).
_EXPORTS = {
    "open_db": "api",
    "profile": "api",
    "compare": "api",
    "list_workloads": "api",
    "Database": "api",
    "Run": "api",
    "Comparison": "api",
    "Diff": "analyze.diff",
    "DiffRow": "analyze.diff",
    "Finding": "analyze.findings",
    "RunRecord": "records",
    "Summary": "records",
    "TopKernel": "records",
    "MemoryOps": "records",
    "KernelRow": "parse.schema",
    "ClassifiedRow": "parse.schema",
    "RangeRow": "parse.schema",
    "Progress": "launch",
    "bench": "api",
    "sweep": "api",
    "tune": "api",
    "Tuning": "records",
    "TuneTrial": "records",
    "BenchRecord": "records",
    "BenchRow": "records",
    "BenchNotFound": "errors",
    "RankReport": "records",
    "RankFigures": "records",
    "IterationSkew": "records",
    "RankIteration": "records",
    "RankDifference": "records",
    "RemovedRun": "records",
    "TorchNotInstalled": "errors",
    "ProfkitError": "errors",
    "UsageError": "errors",
    "WorkloadError": "errors",
    "ToolNotFound": "errors",
    "ToolFailed": "errors",
    "NoKernelsProfiled": "errors",
    "BadExport": "errors",
    "EmptyCapture": "errors",
    "RunNotFound": "errors",
    "RunIncomplete": "errors",
    "RunExists": "errors",
    "StoreError": "errors",
    "ProfkitWarning": "errors",
    "step": "program",
}
__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:
    from .analyze.diff import Diff, DiffRow
    from .analyze.findings import Finding
    from .api import (
        Comparison,
        Database,
        Run,
        bench,
        compare,
        list_workloads,
        open_db,
        profile,
        sweep,
        tune,
    )
    from .errors import (
        BadExport,
        BenchNotFound,
        EmptyCapture,
        NoKernelsProfiled,
        ProfkitError,
        ProfkitWarning,
        RunExists,
        RunIncomplete,
        RunNotFound,
        StoreError,
        ToolFailed,
        ToolNotFound,
        TorchNotInstalled,
        UsageError,
        WorkloadError,
    )
    from .launch import Progress
    from .parse.schema import ClassifiedRow, KernelRow, RangeRow
    from .program import step
    from .records import (
        BenchRecord,
        BenchRow,
        IterationSkew,
        MemoryOps,
        RankDifference,
        RankFigures,
        RankIteration,
        RankReport,
        RemovedRun,
        RunRecord,
        Summary,
        TopKernel,
        TuneTrial,
        Tuning,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'profkit' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
