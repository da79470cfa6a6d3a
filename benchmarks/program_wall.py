"""``profkit run -- PROGRAM`` against the program alone (issue 35): for each program, side by
side in one command, on one machine:

- **bare**: the program in plain Python until the end of the window (warm-up + iterations
  optimizer steps of its first optimizer; its forward calls where it makes none), then ended
  with its worker processes: a stub starts it with runpy and one process-wide hook, nothing of
  profkit's loaded; run once before (not timed) so that both find the files cached;
- **profkit**: ``profkit run [--tool T] --warmup W --iters I --no-report -- PROGRAM``, the whole
  command (profiling, import, storage), and what the run says of it (tool, how soon the
  program was stopped after its window).

Usage: ``python benchmarks/program_wall.py [--tool T ...] [--warmup W] [--iters I] -- NAME=ARGV ;; NAME=ARGV``
(argv words separated by spaces; programs by `;;`). Prints a Markdown table and JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STUB = r"""
import os, runpy, sys, time
import torch
import torch.optim.optimizer as optim
need = int(sys.argv[1]); argv = sys.argv[2:]
state = {"n": 0, "first": None, "model": None, "calls": 0}
def done():
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    sys.stdout.flush(); sys.stderr.flush()
    mp = sys.modules.get("multiprocessing")
    for child in (mp.active_children() if mp else []):
        child.kill()  # as profkit ends a program's DataLoader workers: no wait on them
    os._exit(0)
def post(opt, args, kwargs):
    if state["first"] is None:
        state["first"] = id(opt)
    if id(opt) == state["first"]:
        state["n"] += 1
        if state["n"] >= need:
            done()
optim.register_optimizer_step_post_hook(post)
depth = [0]
def pre(module, args):
    depth[0] += 1
    if depth[0] == 1 and state["first"] is None and next(module.parameters(), None) is not None:
        if state["model"] is None:
            state["model"] = id(module)
        if id(module) == state["model"]:
            state["calls"] += 1
            if state["calls"] > need:
                done()
def after(module, args, out):
    depth[0] -= 1
torch.nn.modules.module.register_module_forward_pre_hook(pre)
torch.nn.modules.module.register_module_forward_hook(after, always_call=True)
if argv[0] == "-m":
    sys.argv = argv[1:]; runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = argv; sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0]))); runpy.run_path(argv[0], run_name="__main__")
"""


def program_args(argv: list[str]) -> list[str]:
    """The script and its arguments, without a leading python."""
    return argv[1:] if Path(argv[0]).name.startswith("python") else argv


def bare(argv: list[str], steps: int, cwd: Path) -> float:
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-c", STUB, str(steps), *program_args(argv)],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"bare run of {argv} failed ({r.returncode}): {r.stderr[-2000:]}")
    return wall


def profiled(
    argv: list[str], tool: str | None, warmup: int, iters: int, cwd: Path, db: Path
) -> tuple[float, dict]:
    cmd = [
        sys.executable,
        "-m",
        "profkit",
        "--db",
        str(db),
        "run",
        "--warmup",
        str(warmup),
        "--iters",
        str(iters),
        "--no-report",
        *(["--tool", tool] if tool else []),
        "--",
        *argv,
    ]
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed ({r.returncode}): {r.stderr[-3000:]}")
    import profkit

    run = profkit.open_db(db).list_runs()[-1]
    program = run.info.program or {}
    plan = run.info.ncu_plan or {}
    return wall, {
        "run": run.name,
        "tool": run.tool,
        "stopped_after_s": program.get("stopped_after_s"),
        "steps": (program.get("steps") or {}).get("said"),
        "kernels": run.kernel_count,
        "counted_by": plan.get("counted_by") or plan.get("timed_by"),
        "profiled_wall_s": run.profiled_wall_s,
    }


def main() -> None:
    argv = sys.argv[1:]
    at = argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", action="append", default=None)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=2)
    parser.add_argument("--cwd", type=Path, default=Path.cwd())
    args = parser.parse_args(argv[:at])
    programs = [p.strip() for p in " ".join(argv[at + 1 :]).split(";;") if p.strip()]
    tools = args.tool or [None]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in programs:
            name, _, words = spec.partition("=")
            pargv = shlex.split(words)
            # once first: files and kernels cached for both
            bare(pargv, args.warmup + args.iters, args.cwd)
            base = bare(pargv, args.warmup + args.iters, args.cwd)
            for tool in tools:
                db = Path(tmp) / f"{name}-{tool or 'auto'}.db"
                wall, said = profiled(pargv, tool, args.warmup, args.iters, args.cwd, db)
                row = {
                    "program": name,
                    "tool": said["tool"],
                    "asked": tool or "auto",
                    "bare_s": round(base, 2),
                    "profkit_s": round(wall, 2),
                    "ratio": round(wall / base, 2),
                    **said,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    print()
    print(
        "| program | tool | bare to window end | profkit run | ratio | stopped after window | steps |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['program']} | {r['tool']} ({r['asked']}) | {r['bare_s']} s | {r['profkit_s']} s | {r['ratio']}x | "
            f"{r['stopped_after_s']} s | {r['steps']} |"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
