"""What profkit prints for every committed capture, recorded before issue 22's refactor moves
anything, so that a test (tests/test_behaviour.py) can show it prints the same afterwards.

    PYTHONPATH=<worktree> python3 tests/data/behaviour/record.py         # rewrite golden.json.gz
    PYTHONPATH=<worktree> python3 tests/data/behaviour/record.py --bench # remake bench.db.gz first

Every capture under tests/data is imported with ``profkit import --name NAME`` into a fresh
database, in the fixed order of CAPTURES (so run ids are 1, 2, ... in that order); the captures
that ``profkit run`` stores through a path of its own (the ranks of a distributed job merged
into one run; ncu's per-function plan joined with the harness's CUPTI times) are then stored
the way tests/test_ranks.py, test_ncu_plan.py and test_steps.py store them (COMPOSED). For each
run: ``profkit runs -f json`` (once), ``kernels RUN -f json``, ``summary RUN -f json`` and
``ranges RUN -f json``; ``diff A B -f json --match M`` for the pairs in DIFFS and each of the
three matches (a refused pair is recorded as its exit status and one-line error); and
``bench --show 1 -f json`` of bench.db.gz, a benchmark stored by ``profkit.bench`` on the CPU.
Every command runs in-process through the Typer app, as tests/conftest.py's cli() does.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
DATA = HERE.parent  # tests/data
GOLDEN = HERE / "golden.json.gz"
BENCH_DB = HERE / "bench.db.gz"

# Every capture under tests/data, imported in this order (run id = position + 1).
CAPTURES = [
    "ncu/precision_zoo.raw.csv.gz",
    "ncu/precision_zoo.raw-autounits.csv",
    "ncu/precision_zoo.ncu-rep.gz",
    "ncu/resnet18_fp16_eager.raw.csv.gz",
    "ncu/resnet18_fp16_eager.raw-autounits.csv.gz",
    "ncu/resnet18_fp16_eager.ncu-rep.gz",
    "ncu/resnet18_fp32_eager.raw.csv.gz",
    "ncu/resnet18_fp32_eager.ncu-rep.gz",
    "ncu/resnet18_bf16_torchscript.raw.csv.gz",
    "ncu/resnet18_bf16_torchscript.ncu-rep.gz",
    "ncu/vgg16_fp16_eager.raw.csv.gz",
    "nsys/nsys_resnet18_fp16.sqlite.gz",
    "nsys/nsys_resnet18_train_amp.sqlite.gz",
    "nsys/nsys_run_resnet18_train_amp.sqlite.gz",
    "torch/kineto_resnet18_fp16.json.gz",
    "torch/torch_run_resnet18_train_amp.json.gz",
    "torch/cpu_resnet18_fp32.json.gz",
    "torch/cpu_resnet18_bf16.json.gz",
    "torch/cpu_resnet18_train_fp32.json.gz",
    "diff/r18_fp16_eager_ncu.raw.csv.gz",
    "diff/r18_fp16_torchscript_ncu.raw.csv.gz",
    "diff/r18_fp16_heuristic_nsys.sqlite.gz",
    "diff/r18_fp16_autotuned_nsys.sqlite.gz",
    "diff/r18_fp16_graphs_nsys.sqlite.gz",
    "diff/r18_fp16_eager_torch.json.gz",
    "diff/r18_fp16_compile_torch.json.gz",
    "report/mnv2_fp16_ncu.raw.csv.gz",
    "report/effb0_fp16_ncu.raw.csv.gz",
    "report/r50_fp16_b64_nsys.sqlite.gz",
    "ncu_plan/vgg16_fp16.raw.csv.gz",
    "ncu_plan/vgg16_fp16.raw-mangled.csv.gz",
    "ncu_plan/vgg16_fp16_full_every_launch.raw.csv.gz",
    "ncu_plan/mnv2_fp16.raw.csv.gz",
    "ncu_plan/mnv2_fp16.raw-mangled.csv.gz",
    "ncu_plan/mnv2_fp16_full_every_launch.raw.csv.gz",
    "steps/resnet18_train_amp.ncu.raw.csv.gz",
    "steps/resnet18_train_amp.ncu.raw-mangled.csv.gz",
    "steps/resnet18_train_amp.ncu-every.raw.csv.gz",
    "steps/resnet18_train_amp.nsys.sqlite.gz",
    "steps/resnet18_train_amp.torch.json.gz",
    "steps/bert_encoder_train_amp.ncu.raw.csv.gz",
    "steps/bert_encoder_train_amp.ncu.raw-mangled.csv.gz",
    "steps/bert_encoder_train_amp.ncu-every.raw.csv.gz",
    "steps/bert_encoder_train_amp.nsys.sqlite.gz",
    "steps/bert_encoder_train_amp.torch.json.gz",
    "attention/attention_zoo_fp32.ncu.raw.csv.gz",
    "attention/attention_zoo_fp16.ncu.raw.csv.gz",
    "attention/attention_zoo_bf16.ncu.raw.csv.gz",
    "attention/attention_zoo_fp16.torch.json.gz",
    "attention/attention_zoo_bf16.torch.json.gz",
    "attention/bert_encoder_fp16.ncu.raw.csv.gz",
    "attention/bert_encoder_bf16.ncu.raw.csv.gz",
    "attention/bert_encoder_fp16.torch.json.gz",
    "attention/bert_encoder_bf16.torch.json.gz",
    "attention/gpt_decoder_fp16_compile.ncu.raw.csv.gz",
    "attention/gpt_decoder_fp16_compile.torch.json.gz",
    "attention/resnet18_bf16_compile.ncu.raw.csv.gz",
    "attention/resnet18_bf16_compile.torch.json.gz",
    # A distributed job's files, each imported alone as well (as `profkit import` reads them:
    # no ranks); COMPOSED stores them as `profkit run --nproc-per-node 2` does.
    "ddp/nsys_resnet50_ddp_train_amp.sqlite.gz",
    "ddp/torch_resnet50_ddp_train_amp.rank0.json.gz",
    "ddp/torch_resnet50_ddp_train_amp.rank1.json.gz",
    "ddp/cpu_resnet50_ddp_train_fp32.rank0.json.gz",
    "ddp/cpu_resnet50_ddp_train_fp32.rank1.json.gz",
]

# Files under tests/data that are not captures: what each is (checked by the test: every other
# file must be in CAPTURES, so that a capture committed later is not silently left out).
NOT_CAPTURES = {
    "behaviour/": "this recording",
    "where/": "issue 23's captures with attribution, made after this recording (tests/test_where.py reads them)",
    "catalog/": "issue 23's catalog captures with attribution (compiled under nsys and torch.profiler, eager under ncu), made after this recording (tests/test_where.py reads them)",
    "capture/": "the scripts that made the captures",
    "findings/": "issue 36's captures of models nobody on the team wrote under each tool (tests/test_findings_36.py reads them)",
    "torch/cpu_resnet18_fp16_attribution": ("issue 37's CPU trace with attribution: fp16 convolutions on PyTorch's "
                                            "slow fallback (tests/test_honest.py)"),
    "torch/cpu_heads_contiguous_attribution": ("issue 37's CPU trace with attribution: attention heads split with "
                                               "transpose().contiguous() (tests/test_honest.py)"),
    "torch/profiler_steps": "issue 35's torch.profiler trace with ProfilerStep#N ranges (tests/test_program_imports.py)",
    "nsys/autograd_shapes": "issue 35's nsys capture of an unmodified script with --pytorch=autograd-shapes-nvtx (tests/test_program_imports.py)",
    "programs/": "users' scripts profkit runs as they are (tests/test_program_scripts.py): no captures",
    "store/": "old databases (schema 5, 7) and what that profkit printed; tests/test_store.py compares them",
    "README.md": "the folder's description",
    "_sum.csv": "nsys stats oracles",
    ".key_averages.csv": "torch.profiler's own operator tables (oracles)",
    ".txt": "profkit diff tables, env and metric lists (oracles, notes)",
    ".log": "tool logs",
    ".job.json": "job files",
    ".harness": "harness files (a rank's pid; the timing harness's thread ids), read by COMPOSED",
    ".summary.json": "profkit summary outputs recorded on the GPU machine (oracles)",
    ".kernel_times.json.gz": "the timing harness's CUPTI records, read by COMPOSED",
    "diff/runs.json": "profkit runs output recorded on the GPU machine (an oracle)",
    "import_speed/": "digests of what the nsys import made of each committed export before issue 25 (tests/test_import_speed.py)",
}


def run_name(rel: str) -> str:
    """The run's fixed name: the capture's path under tests/data, '/' as '.', the suffixes cut."""
    name = rel
    for suffix in (".gz", ".csv", ".json", ".sqlite", ".ncu-rep"):
        name = name.removesuffix(suffix)
    return name.replace("/", ".")


def _plain(path: Path, workdir: Path) -> Path:
    """A gzipped capture decompressed into ``workdir`` (the nsys reader takes a plain SQLite file)."""
    out = workdir / path.name.removesuffix(".gz")
    if not out.exists():
        out.write_bytes(gzip.decompress(path.read_bytes()))
    return out


def _composed(workdir: Path) -> list[tuple[str, Callable[[], Any], dict[str, Any]]]:
    """(run name, the capture as ``profkit run`` reads it, the run's fields) for the captures
    that ``profkit run`` stores through a path of its own. These (and _store) use profkit's
    internal readers and store, as the tests named beside each do: a refactor that moves them
    changes the imports here, never the outputs."""
    from profkit import nvtx_ranges
    from profkit.parse.kineto import read_kineto
    from profkit.parse.ncu_plan import read_per_function
    from profkit.parse.nsys_sqlite import read_nsys_sqlite
    from profkit.parse.ranks import merge_ranks

    ddp = DATA / "ddp"

    def pids(prefix: str) -> dict[int, int]:  # tests/test_ranks.py's _pids
        infos = [json.loads((ddp / f"{prefix}.harness.rank{r}.json").read_text()) for r in (0, 1)]
        return {i["pid"]: i["rank"] for i in infos}

    def ranks(prefix: str) -> Any:
        return merge_ranks({r: read_kineto(ddp / f"{prefix}.rank{r}.json.gz") for r in (0, 1)})

    def plan(w: str) -> Any:  # tests/test_ncu_plan.py's per_function
        p = DATA / "ncu_plan"
        return read_per_function(p / f"{w}_fp16.raw.csv.gz", p / f"{w}_fp16.raw-mangled.csv.gz",
                                 p / f"{w}_fp16.kernel_times.json.gz", f"{w}.fp16.eager", "profkit", None)

    def step(w: str) -> Any:  # tests/test_steps.py
        base = DATA / "steps" / f"{w}_amp"
        times = json.loads(Path(f"{base}.ncu.harness-times.json").read_text())
        return read_per_function(Path(f"{base}.ncu.raw.csv.gz"), Path(f"{base}.ncu.raw-mangled.csv.gz"),
                                 Path(f"{base}.ncu.kernel_times.json.gz"), nvtx_ranges.tag(w, "amp", "eager"),
                                 nvtx_ranges.DOMAIN, {int(k): v for k, v in times["thread_ids"].items()},
                                 process_wide=times["iteration_ranges"] == "process")

    def fields(workload: str, precision: str, **info: Any) -> dict[str, Any]:
        return {"source": "run", "workload": workload, "precision": precision, "mode": "eager",
                "device": "cpu" if workload.startswith("cpu") else "cuda", "info": info}

    nsys_ddp = "nsys_resnet50_ddp_train_amp"
    return [
        ("composed.ddp_nsys_ranks",  # tests/test_ranks.py
         lambda: read_nsys_sqlite(_plain(ddp / f"{nsys_ddp}.sqlite.gz", workdir), ranks=pids(nsys_ddp)),
         fields("resnet50_ddp_train", "amp", world_size=2)),
        ("composed.ddp_torch_ranks", lambda: ranks("torch_resnet50_ddp_train_amp"),
         fields("resnet50_ddp_train", "amp", world_size=2)),
        ("composed.ddp_cpu_ranks", lambda: ranks("cpu_resnet50_ddp_train_fp32"),
         fields("cpu_resnet50_ddp_train", "fp32", world_size=2)),
        ("composed.vgg16_plan", lambda: plan("vgg16"), fields("vgg16", "fp16")),
        ("composed.mnv2_plan", lambda: plan("mnv2"), fields("mnv2", "fp16")),
        ("composed.resnet18_train_step_plan", lambda: step("resnet18_train"), fields("resnet18_train", "amp")),
        ("composed.bert_encoder_train_step_plan", lambda: step("bert_encoder_train"),
         fields("bert_encoder_train", "amp")),
    ]


def _store(db: Path, name: str, capture: Any, fields: dict[str, Any]) -> None:
    """Store ``capture`` as run ``name``, as ``profkit run`` does at its end (tests/test_ranks.py's _store)."""
    from profkit.ingest import store_capture
    from profkit.store import Store

    store = Store(db)
    reserved = store.reserve(None, name, {"name": name, **fields}, status="running")
    store_capture(store, capture, {"name": name, **fields}, reserved)


# Pairs for `profkit diff`, by run name: tests/test_diff.py's (eager/ts, heur/tuned, fp32/fp16,
# fp16/nsys3, t_eager/t_compile, heur/graphs, eager/heur, the CPU fp32/bf16 pair) and a few more
# across the folders (precisions under ncu and torch, ncu plan against every launch, ranks).
DIFFS = [
    ("diff.r18_fp16_eager_ncu.raw", "diff.r18_fp16_torchscript_ncu.raw"),
    ("diff.r18_fp16_heuristic_nsys", "diff.r18_fp16_autotuned_nsys"),
    ("ncu.resnet18_fp32_eager.raw", "ncu.resnet18_fp16_eager.raw"),
    ("ncu.resnet18_fp16_eager.raw", "nsys.nsys_resnet18_fp16"),
    ("diff.r18_fp16_eager_torch", "diff.r18_fp16_compile_torch"),
    ("diff.r18_fp16_heuristic_nsys", "diff.r18_fp16_graphs_nsys"),
    ("diff.r18_fp16_eager_ncu.raw", "diff.r18_fp16_heuristic_nsys"),
    ("torch.cpu_resnet18_fp32", "torch.cpu_resnet18_bf16"),
    ("torch.cpu_resnet18_fp32", "diff.r18_fp16_eager_torch"),  # refused: CPU operators against GPU kernels
    ("ncu.resnet18_fp16_eager", "ncu.resnet18_fp16_eager.raw"),  # the report against its CSV
    ("attention.attention_zoo_fp16.ncu.raw", "attention.attention_zoo_bf16.ncu.raw"),
    ("attention.bert_encoder_fp16.torch", "attention.bert_encoder_bf16.torch"),
    ("steps.resnet18_train_amp.nsys", "steps.resnet18_train_amp.torch"),
    ("composed.vgg16_plan", "ncu_plan.vgg16_fp16_full_every_launch.raw"),
    ("composed.ddp_torch_ranks", "composed.ddp_nsys_ranks"),
]
MATCHES = ("exact", "family", "op")


# ------------------------------------------------------------------------------ running commands
def invoke(*args: str, db: Path, text: bool = False) -> dict[str, Any]:
    """``profkit ARGS --db DB`` in-process: {"exit": status, "json": what stdout parsed to} (or
    with ``text``, {"exit": status, "stdout": its text}) on success, {"exit": status, "stderr":
    its text} when refused."""
    from typer.testing import CliRunner

    from profkit.cli import app

    r = CliRunner().invoke(app, [*args, "--db", str(db)])
    if r.exit_code != 0:
        return {"exit": r.exit_code, "stderr": r.stderr.strip()}
    return {"exit": 0, "stdout": r.stdout} if text else {"exit": 0, "json": json.loads(r.stdout)}


# Keys whose values are the wall-clock time of the recording (an import's or a run's start and
# end, stamped by now()): they differ on every recording, so they become "<time>".
TIME_KEYS = {"started_at", "finished_at"}


def normalise(value: Any, roots: dict[str, str]) -> Any:
    """What legitimately varies between two recordings, made constant: the wall-clock stamps
    (TIME_KEYS), and absolute paths: the temporary folder of the database (``roots``' "<tmp>")
    and this checkout's tests/data ("<data>"; another worktree or machine has another path)."""
    if isinstance(value, dict):
        return {k: "<time>" if k in TIME_KEYS and isinstance(v, str) else normalise(v, roots)
                for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v, roots) for v in value]
    if isinstance(value, str):
        for mark, root in roots.items():
            value = value.replace(root, mark)
    return value


def record(workdir: Path, progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Every output, normalised: {"runs": ..., "captures": {run: {"kernels", "summary",
    "ranges"}}, "diff": {"A B match": ...}, "bench": ...}. ``workdir``: an empty folder."""
    db = workdir / "behaviour.db"
    roots = {"<tmp>": str(workdir.resolve()), "<data>": str(DATA)}
    names = []
    for rel in CAPTURES:
        t = time.monotonic()
        name = run_name(rel)
        done = invoke("import", str(DATA / rel), "--name", name, db=db, text=True)
        if done["exit"] != 0:
            raise SystemExit(f"importing {rel} failed: {done['stderr']}")
        names.append(name)
        progress(f"{time.monotonic() - t:6.2f} s  import {rel}")
    for name, read, fields in _composed(workdir):
        t = time.monotonic()
        _store(db, name, read(), fields)
        names.append(name)
        progress(f"{time.monotonic() - t:6.2f} s  store {name}")
    t = time.monotonic()
    out: dict[str, Any] = {"runs": invoke("runs", "-f", "json", db=db), "captures": {}, "diff": {}}
    for name in names:
        out["captures"][name] = {cmd: invoke(cmd, name, "-f", "json", db=db)
                                 for cmd in ("kernels", "summary", "ranges")}
    progress(f"{time.monotonic() - t:6.2f} s  runs, kernels, summary, ranges")
    t = time.monotonic()
    for a, b in DIFFS:
        for match in MATCHES:
            out["diff"][f"{a} {b} {match}"] = invoke("diff", a, b, "--match", match, "-f", "json", db=db)
    progress(f"{time.monotonic() - t:6.2f} s  diff")
    bench_db = workdir / "bench.db"
    bench_db.write_bytes(gzip.decompress(BENCH_DB.read_bytes()))
    out["bench"] = invoke("bench", "--show", "1", "-f", "json", db=bench_db)
    return normalise(out, roots)


# ------------------------------------------------------------------------------ storing it compactly
# A run's kernels are stored whole up to this many rows; past it, as their count, the sha256 of
# their canonical JSON and the first and last EDGE rows (the file stays small).
FULL_ROWS = 3000
EDGE = 50


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def compact(rec: dict[str, Any]) -> dict[str, Any]:
    """The recording as stored: long kernel lists shortened (FULL_ROWS)."""
    out = json.loads(json.dumps(rec))
    for cap in out["captures"].values():
        k = cap["kernels"]
        rows = k.get("json")
        if isinstance(rows, list) and len(rows) > FULL_ROWS:
            # In this order: a test names a difference in the first and last rows before the hash's.
            k["json"] = {"rows": len(rows), "head": rows[:EDGE], "tail": rows[-EDGE:],
                         "sha256": hashlib.sha256(canonical(rows).encode()).hexdigest()}
    return out


def write(rec: dict[str, Any], path: Path = GOLDEN) -> None:
    text = json.dumps(rec, indent=0, ensure_ascii=False, separators=(",", ":")).encode()
    path.write_bytes(gzip.compress(text, 9, mtime=0))  # mtime 0: the same recording, the same bytes


def load(path: Path = GOLDEN) -> dict[str, Any]:
    return json.loads(gzip.decompress(path.read_bytes()))


def make_bench_db(out: Path = BENCH_DB) -> None:
    """bench.db.gz: tiny_classifier (tests/workloads) benchmarked on the CPU by profkit.bench, in
    fp32, fp16 and bf16 (which that model refuses at run time: a failed row), eager and
    torchscript. Its times are this machine's: made once, committed, and only read afterwards."""
    import profkit

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        profkit.bench(str(DATA.parent / "workloads" / "tiny_classifier.py"), precisions=["fp32", "fp16", "bf16"],
                      modes=["eager", "torchscript"], device="cpu", batch_size=4, iters=3, warmup=1, db=db)
        import sqlite3

        one = Path(tmp) / "one.db"  # one file, the write-ahead log folded in, free pages dropped
        con = sqlite3.connect(db)
        con.execute("vacuum into ?", [str(one)])
        con.close()
        out.write_bytes(gzip.compress(one.read_bytes(), 9, mtime=0))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", action="store_true", help="remake bench.db.gz (a new CPU benchmark) first")
    p.add_argument("--out", type=Path, default=GOLDEN, help="where to write the recording")
    args = p.parse_args()
    if args.bench:
        make_bench_db()
    t = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="profkit-behaviour-") as tmp:
        rec = record(Path(tmp), progress=lambda s: print(s, file=sys.stderr))
    write(compact(rec), args.out)
    print(f"recorded {len(rec['captures'])} runs, {len(rec['diff'])} diffs in {time.monotonic() - t:.1f} s: "
          f"{args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
