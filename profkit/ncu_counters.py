"""ncu's counters kept across runs: which kernel functions an ncu run of the per-function plan
must count, and what it keeps for the next run.

A kernel function's tensor-path counters do not change between runs of the same binaries on
the same GPU, so the counters of each function ncu counted are kept in the database
(``store.counters``), keyed by the GPU, the environment that fixes the function's code
(``profkit.code_versions``: driver, CUDA, PyTorch, every installed package, ncu), the metric
set, and for a kernel torch.compile generated its source's digest (generated names repeat
across models). A run then goes one of two ways:

* **timed first**, where an earlier run of the same workload, precision, batch size, device,
  layout options and kind of kernels (ATen's for eager and TorchScript, Inductor's for
  compile) completed in this environment: its functions are all counted already. The timing
  harness runs alone (the bare run's cost); every function it timed is looked up, and only
  those never counted are profiled by ncu afterwards, filtered to them
  (``ncu.per_function_argv``). Where none is new, ncu is not started at all.
* **counted**, otherwise (or with ``--fresh-counters``): ncu beside the timing harness, as
  on a first run, counting the first launch of every function.

Verdicts come from the counters by the same rules either way (``parse.ncu_plan.read_timed``);
a launch judged from kept counters names the run and launch they were read from.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .code_versions import environment, environment_key
from .records import CounterUse, CountedFunction, RunRecord

if TYPE_CHECKING:
    from .options import RunOptions
    from .parse.ncu_plan import Counted
    from .parse.schema import Capture, KernelRow
    from .store import Store

TIMED_FIRST, COUNTED, FRESH = "timed first", "counted", "fresh"
# Which kernels a mode runs: eager and TorchScript launch ATen's own kernels (the same
# functions, measured in RESULTS.md's compare of ResNet-50), compile Inductor's generated ones.
KERNEL_SOURCES = {"eager": "aten", "torchscript": "aten", "compile": "inductor"}


@dataclass
class CounterPlan:
    """One ncu run's use of the kept counters: its key, strategy and what it took and added."""

    store: Store
    gpu: str
    metric_set: str
    env: dict[str, str]
    signature: str
    strategy: str
    scopes: dict[str, str] = field(default_factory=dict)  # generated kernel name -> source digest
    cached: int = 0
    counted: int = 0
    kept: int = 0

    @property
    def key(self) -> tuple[str, str, str]:
        return self.gpu, environment_key(self.env), self.metric_set

    def scope(self, mangled: str) -> str:
        """Where a function's counters hold: everywhere in the environment for a C++ function
        (its mangled name spells its template arguments, element types included); for a kernel
        torch.compile generated, where its source is the same; for any other name (a Triton or
        other run-time compiled kernel, an ``extern "C"`` one: the same name may be compiled for
        other types), in runs of this signature only."""
        generated = self.scopes.get(mangled)
        if generated:
            return f"source:{generated}"
        return "" if mangled.startswith("_Z") else f"signature:{self.signature}"

    def look_up(self, functions: list[str]) -> dict[str, Counted]:
        """The kept counters of these functions (mangled names), as the join takes them."""
        from .parse.ncu_plan import Counted

        found = self.store.counted(self.key, [(m, self.scope(m)) for m in functions])
        out = {m: Counted(f.name, f.short_name, f.metrics, f.metric_units, kept=f)
               for m in functions if (f := found.get((m, self.scope(m)))) is not None}
        self.cached = len(out)
        return out

    @staticmethod
    def keepable(capture: Capture[KernelRow], functions: dict[str, Counted]) -> dict[str, tuple[Counted, int]]:
        """The functions this run's ncu counted, each with the launch whose counters the run
        shows: what :meth:`keep` writes."""
        return {m: (f, launch) for m, launch in capture.counted_launches.items()
                if (f := functions.get(m)) is not None and f.metrics}

    def keep(self, run: RunRecord, capture: Capture[KernelRow], functions: dict[str, Counted]) -> None:
        """Keep the counters this run's ncu read (:meth:`keepable`)."""
        rows = [CountedFunction(m, self.scope(m), f.name, f.short_name, f.metrics, f.metric_units, run.id, run.name,
                                launch)
                for m, (f, launch) in self.keepable(capture, functions).items()]
        self.kept = self.store.keep_counters(self.key, rows)

    def use(self) -> CounterUse:
        return {"environment": self.env, "environment_key": self.key[1], "signature": self.signature,
                "strategy": self.strategy, "cached": self.cached, "counted": self.counted, "kept": self.kept}


def plan(store: Store, options: RunOptions, workload: str, path: Path, gpu: tuple[str, str], driver: str | None,
         ncu_identity: str | None, set_label: str, metrics: list[str]) -> CounterPlan:
    """How an ncu run of the per-function plan goes (see the module's description). ``path``:
    the workload's file (its content is in the signature: kernels it builds itself change with it)."""
    env = environment(f"{gpu[0]} (sm {gpu[1]})", driver, ncu_identity)
    digest = hashlib.sha256(",".join(sorted(metrics)).encode()).hexdigest()[:12]
    signature = _signature(options, workload, path)
    p = CounterPlan(store, env["gpu"], f"{set_label}:{digest}", env, signature, COUNTED)
    if options.fresh_counters:
        p.strategy = FRESH
    elif store.counted_run(environment_key(env), signature) is not None:
        p.strategy = TIMED_FIRST
    return p


def _signature(options: RunOptions, workload: str, path: Path) -> str:
    """What decides which kernel functions a run launches, as a digest: runs of the same
    signature in one environment launch the same functions (cuDNN's and cuBLAS's heuristics
    aside)."""
    try:
        source = hashlib.sha256(path.read_bytes()).hexdigest()[:20]
    except OSError:
        source = str(path)
    what: dict[str, Any] = {"workload": workload, "source": source, "precision": options.precision,
                            "batch_size": options.batch_size,
                            "device": options.device, "kernels": KERNEL_SOURCES.get(options.mode, options.mode),
                            "switches": options.switches()}
    if options.mode == "compile":
        what["compile_mode"] = options.compile_mode
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:20]
