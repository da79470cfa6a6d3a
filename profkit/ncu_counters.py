"""ncu's counters kept across runs: which kernel functions an ncu run of the per-function plan
must count, and what it keeps for the next run.

A kernel function's tensor-path counters do not change between runs of the same binaries on
the same GPU and the same launch, so the counters of each function ncu counted are kept in
the database (``store.counters``), keyed by the GPU, the environment that fixes the function's
code (``profkit.code_versions``: driver, CUDA, PyTorch, every installed package, ncu, and, as
the run's timing process reports them, every native library it mapped and the workload's own
sources), the metric set, the run's signature (workload, precision, batch size, device,
options: what decides the launches' shapes), the launch configuration (grid and block) of the
launch counted, and for a kernel torch.compile generated its source's digest (generated names
repeat across models). Op counts and bytes are a launch's, not a function's: another
workload's or batch size's counts of the same function are never taken. A run then goes one
of two ways:

* **timed first**, where an earlier run of the same signature completed on this machine (the
  environment's parts known before the run: ``machine_key``): the timing harness runs alone
  (the bare run's cost); every function it timed is looked up with its first launch's
  configuration, and only those not found are profiled by ncu afterwards, filtered to them
  (``ncu.per_function_argv``). Where none is new, ncu is not started at all.
* **counted**, otherwise (or with ``--fresh-counters``): ncu beside the timing harness, as
  on a first run, counting the first launch of every function.

Verdicts come from the counters by the same rules either way (``parse.ncu_plan.read_timed``);
a launch judged from kept counters names the run and launch they were read from.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .code_versions import environment, environment_key
from .records import CountedFunction, CounterUse, HarnessInfo, RunRecord

if TYPE_CHECKING:
    from .options import RunOptions
    from .parse.ncu_plan import Counted
    from .parse.schema import Capture, KernelRow
    from .store import Store
    from .store.counters import CounterKey

TIMED_FIRST, COUNTED, FRESH = "timed first", "counted", "fresh"
# Which kernels a mode runs: eager and TorchScript launch ATen's own kernels (the same
# functions, measured in RESULTS.md's compare of ResNet-50), compile Inductor's generated ones.
KERNEL_SOURCES = {"eager": "aten", "torchscript": "aten", "compile": "inductor"}


# What the run's timing process reports of the code it ran (``harness``, after its measured
# iterations): the environment's parts that the parent cannot read before the run.
PROCESS_PARTS = ("native_libraries", "workload_sources")


@dataclass
class CounterPlan:
    """One ncu run's use of the kept counters: its key, strategy and what it took and added."""

    store: Store
    gpu: str
    metric_set: str
    env: dict[str, str]
    signature: str
    strategy: str
    machine_key: str = (
        ""  # the digest of the environment's parts known before the run: picks the strategy
    )
    scopes: dict[str, str] = field(default_factory=dict)  # generated kernel name -> source digest
    cached: int = 0
    counted: int = 0
    kept: int = 0

    @property
    def key(self) -> CounterKey:
        return self.gpu, environment_key(self.env), self.metric_set, self.signature

    @property
    def known(self) -> bool:
        """Whether the run's process said what code it ran (:meth:`learn`): counters are looked up
        and kept only then."""
        return all(self.env.get(part, "unknown") != "unknown" for part in PROCESS_PARTS)

    def learn(self, info: HarnessInfo) -> None:
        """Take what the run's timing process reported: its generated kernels' source digests,
        the native libraries it mapped and the workload's sources (the environment's last parts)."""
        self.scopes = dict(info.get("generated_kernels") or {})
        for part in PROCESS_PARTS:
            value = info.get(part)
            self.env[part] = value if isinstance(value, str) and value else "unknown"

    def scope(self, mangled: str) -> str:
        """A kernel torch.compile generated is kept where its source is the same (its name comes
        back in other models with other code); any other function by its name (within the run's
        signature and launch configuration, which the key holds)."""
        generated = self.scopes.get(mangled)
        return f"source:{generated}" if generated else ""

    def look_up(self, functions: Mapping[str, str]) -> dict[str, Counted]:
        """The kept counters of these functions (mangled name -> its first launch's configuration,
        ``parse.ncu_plan.timed_functions``), as the join takes them."""
        from .parse.ncu_plan import Counted

        if not self.known:
            return {}
        wanted = {m: (m, self.scope(m), config) for m, config in functions.items()}
        found = self.store.counted(self.key, wanted.values())
        out = {
            m: Counted(f.name, f.short_name, f.metrics, f.metric_units, kept=f)
            for m, k in wanted.items()
            if (f := found.get(k)) is not None
        }
        self.cached = len(out)
        return out

    @staticmethod
    def keepable(
        capture: Capture[KernelRow], functions: dict[str, Counted]
    ) -> dict[str, tuple[Counted, int, str]]:
        """The functions this run's ncu counted, each with the launch whose counters the run
        shows and that launch's configuration: what :meth:`keep` writes."""
        return {
            m: (f, launch, capture.counted_configs[m])
            for m, launch in capture.counted_launches.items()
            if (f := functions.get(m)) is not None and f.metrics and m in capture.counted_configs
        }

    def keep(
        self, run: RunRecord, capture: Capture[KernelRow], functions: dict[str, Counted]
    ) -> None:
        """Keep the counters this run's ncu read (:meth:`keepable`), where the run's process said
        what code it ran."""
        rows = (
            [
                CountedFunction(
                    m,
                    self.scope(m),
                    config,
                    f.name,
                    f.short_name,
                    f.metrics,
                    f.metric_units,
                    run.id,
                    run.name,
                    launch,
                )
                for m, (f, launch, config) in self.keepable(capture, functions).items()
            ]
            if self.known
            else []
        )
        self.kept = self.store.keep_counters(self.key, rows)

    def use(self) -> CounterUse:
        return {
            "environment": self.env,
            "environment_key": self.key[1],
            "machine_key": self.machine_key,
            "signature": self.signature,
            "strategy": self.strategy,
            "cached": self.cached,
            "counted": self.counted,
            "kept": self.kept,
        }


def plan(
    store: Store,
    options: RunOptions,
    workload: str,
    path: Path,
    gpu: tuple[str, str],
    driver: str | None,
    ncu_identity: str | None,
    set_label: str,
    metrics: list[str],
) -> CounterPlan:
    """How an ncu run of the per-function plan goes (see the module's description). ``path``:
    the workload's file (its content is in the signature: kernels it builds itself change with it)."""
    env = environment(f"{gpu[0]} (sm {gpu[1]})", driver, ncu_identity)
    digest = hashlib.sha256(",".join(sorted(metrics)).encode()).hexdigest()[:12]
    signature = _signature(options, workload, path)
    p = CounterPlan(
        store, env["gpu"], f"{set_label}:{digest}", env, signature, COUNTED, environment_key(env)
    )
    if options.fresh_counters:
        p.strategy = FRESH
    elif store.counted_run(p.machine_key, signature) is not None:
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
    what: dict[str, Any] = {
        "workload": workload,
        "source": source,
        "precision": options.precision,
        "batch_size": options.batch_size,
        "device": options.device,
        "kernels": KERNEL_SOURCES.get(options.mode, options.mode),
        "switches": options.switches(),
    }
    if options.mode == "compile":
        what["compile_mode"] = options.compile_mode
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:20]
