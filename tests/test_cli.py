"""The CLI over real captures: import, runs, kernels, summary, the output contract, what a
person sees in a terminal and through a pipe, and one clear line for every bad input, with
the database left as it was."""

from __future__ import annotations

import gzip
import json
import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from .conftest import NCU_DATA, cli, cli_json, help_words, one_line_error

CSV = NCU_DATA / "resnet18_fp16_eager.raw.csv.gz"


def run_count(db) -> int:
    return sqlite3.connect(db).execute("select count(*) from runs").fetchone()[0]


def kernel_count(db) -> int:
    return sqlite3.connect(db).execute("select count(*) from kernels").fetchone()[0]


def test_import_prints_run_name_last(db):
    r = cli("import", str(CSV), db=db)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().splitlines()[-1] == "resnet18_fp16_eager"


def test_import_report_without_ncu(db, ncu_rep_dir):
    r = cli("import", str(ncu_rep_dir / "precision_zoo.ncu-rep"), "--name", "zoo", db=db)
    assert r.exit_code == 0, r.output
    s = json.loads(cli("summary", "zoo", "-f", "json", db=db).stdout)
    assert s["kernels"] == 18


def test_output_contract(db):
    cli("import", str(CSV), "--name", "r", db=db)
    ks = json.loads(cli("kernels", "r", "-f", "json", db=db).stdout)
    assert len(ks) == 162
    for k in ks:
        assert isinstance(k["name"], str) and isinstance(k["duration_ns"], int)
        assert k["nvtx_range"] == "resnet18.fp16.eager.iter0"
        assert k["precision"] in ("fp32", "fp16") and k["tensor_core"] in (True, False)
        # Counters decided tensor cores; off them a name rule gave the precision (issue 23).
        assert (
            k["evidence"] == "metrics" if k["tensor_core"] else k["evidence"] in ("metrics", "name")
        )
        assert k["evidence_detail"].startswith("tensor-path ops")
    s = json.loads(cli("summary", "r", "-f", "json", db=db).stdout)
    assert s["kernels"] == 162
    assert s["gpu_time_ns"] == sum(k["duration_ns"] for k in ks)
    assert isinstance(s["gpu_time_ns"], int) and 0 <= s["tensor_core_time_pct"] <= 100
    tc = sum(k["duration_ns"] for k in ks if k["tensor_core"])
    assert s["tensor_core_time_pct"] == pytest.approx(100 * tc / s["gpu_time_ns"], abs=0.01)
    assert sum(s["time_by_precision_ns"].values()) == s["gpu_time_ns"]
    # By id as well as by name; csv and table forms work.
    assert cli("summary", "1", "-f", "csv", db=db).stdout.startswith(
        "precision,gpu_time_ns,kernels"
    )
    assert cli("kernels", "1", "-f", "csv", db=db).stdout.count("\n") == 163
    assert "tensor cores" in cli("summary", "r", db=db).stdout
    assert cli("kernels", "r", "--limit", "3", db=db).exit_code == 0
    runs = json.loads(cli("runs", "-f", "json", db=db).stdout)
    assert runs[0]["name"] == "r" and runs[0]["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert runs[0]["workload"] == "resnet18" and runs[0]["precision"] == "fp16"


def test_db_from_environment_and_global_option(tmp_path, monkeypatch):
    env_db = tmp_path / "env.db"
    monkeypatch.setenv("PROFKIT_DB", str(env_db))
    assert cli("import", CSV).exit_code == 0
    assert run_count(env_db) == 1
    other = tmp_path / "other.db"
    assert cli("--db", other, "import", CSV).exit_code == 0
    assert run_count(other) == 1 and run_count(env_db) == 1


def test_second_import_makes_a_new_run(db):
    first = cli("import", str(CSV), db=db).stdout.strip()
    r = cli("import", str(CSV), db=db)
    assert r.exit_code == 0
    assert r.stdout.strip() == f"{first}-2"
    assert "imported before as resnet18_fp16_eager" in r.stderr
    assert run_count(db) == 2 and kernel_count(db) == 2 * 162


def test_name_clash_refused_and_database_unchanged(db):
    cli("import", str(CSV), "--name", "a", db=db)
    before = (run_count(db), kernel_count(db))
    r = cli("import", str(NCU_DATA / "resnet18_fp32_eager.raw.csv.gz"), "--name", "a", db=db)
    assert r.exit_code == 1 and "already exists" in r.stderr
    assert (run_count(db), kernel_count(db)) == before
    # issue 37: the same file under the name of its run gives that run back (a notebook cell run twice)
    r = cli("import", str(CSV), "--name", "a", db=db)
    assert r.exit_code == 0 and (run_count(db), kernel_count(db)) == before


def bad_inputs(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    (tmp_path / "trunc.csv.gz").write_bytes(gzip.compress(CSV.read_bytes() and b"x" * 1000)[:20])
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "empty.ncu-rep").write_bytes(b"")
    (tmp_path / "junk.ncu-rep").write_bytes(b"not a report" * 100)
    header_only = gzip.decompress(CSV.read_bytes()).decode().splitlines()[:2]
    (tmp_path / "header.csv").write_text("\n".join(header_only) + "\n")
    return {
        "missing.csv": "no such file",
        ".": "is a folder",
        "notes.txt": "don't know how to import",
        "empty.csv": "is empty",
        "other.csv": "not an ncu raw-page CSV export",
        "trunc.csv.gz": "damaged gzip",
        "empty.ncu-rep": "is empty",
        "junk.ncu-rep": "could not be read",
        "header.csv": "holds no kernel rows",
    }


def test_bad_imports_one_line_each(tmp_path, db):
    cli("import", str(CSV), "--name", "keep", db=db)
    for name, message in bad_inputs(tmp_path).items():
        one_line_error(cli("import", str(tmp_path / name), db=db), message)
    assert run_count(db) == 1 and kernel_count(db) == 162


def test_other_bad_inputs(tmp_path, db):
    cli("import", str(CSV), "--name", "keep", db=db)
    cases = [
        (["summary", "nosuch"], 1, "no run 'nosuch'"),
        (["kernels", "99"], 1, "no run '99'"),
        (["ranges", "nosuch"], 1, "no run 'nosuch'"),
        (
            ["import", str(CSV), "--name", "bad name!"],
            2,
            "--name 'bad name!' is not a usable run name",
        ),
        (["import", str(CSV), "--name", "123"], 2, "--name '123' is not a usable run name"),
        (["import", str(CSV), "--name", ".."], 2, "--name '..' is not a usable run name"),
        (["summary", "keep", "--top", "-1"], 2, "Invalid value for '--top'"),
        (["kernels", "keep", "--limit", "-3"], 2, "Invalid value for '--limit'"),
        # A count too large for a slice or the database's integers (issue 37's review: tracebacks)
        (["kernels", "keep", "--limit", "9" * 23], 2, "Invalid value for '--limit'"),
        (["run", "resnet18", "--iters", "9" * 23], 2, "--iters must be at most 2147483647"),
        (
            ["run", "resnet18", "--batch-size", "9" * 23],
            2,
            "--batch-size must be at most 2147483647",
        ),
        (["run", "resnet18", "--warmup", "9" * 23], 2, "--warmup must be at most 2147483647"),
        (
            ["rm", "keep", "--format", "xml"],
            2,
            "Invalid value for '--format' / '-f': 'xml' is not one of",
        ),
        (
            ["import", str(NCU_DATA / "resnet18_fp32_eager.raw.csv.gz"), "--name", "keep"],
            1,
            "Choose another --name",
        ),
        (["run", "nosuch"], 1, "unknown workload"),
        (
            ["run", "resnet18", "--precision", "fp7"],
            2,
            "Invalid value for '--precision': 'fp7' is not one of 'fp32'",
        ),
        (["run", "resnet18", "--mode", "jit"], 2, "Invalid value for '--mode'"),
        (["run", "resnet18", "--batch-size", "zero"], 2, "Invalid value for '--batch-size'"),
        (["run", str(tmp_path / "nofile.py")], 1, "workload file not found"),
        (["kernels"], 2, "Missing argument 'RUN'"),
        (["kernels", "keep", "--format", "xml"], 2, "Invalid value for '--format'"),
        (["summary", "keep", "--nope"], 2, "No such option: --nope"),
        (["nosuchcommand"], 2, "No such command"),
    ]
    for argv, code, message in cases:
        one_line_error(cli(*argv, db=db), message, code)
    assert run_count(db) == 1
    fresh = tmp_path / "fresh.db"
    assert cli("run", "resnet18", "--precision", "fp7", db=fresh).exit_code == 2
    assert not fresh.exists()


def test_not_a_profkit_database(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 200)
    r = cli("runs", db=junk)
    assert r.exit_code == 1 and "not a usable SQLite database" in r.stderr
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("create table t (x)")
    r = cli("runs", db=other)
    assert r.exit_code == 1 and "not a profkit one" in r.stderr
    r = cli("runs", db=tmp_path / "absent.db")
    assert r.exit_code == 1 and "no database" in r.stderr
    assert not (tmp_path / "absent.db").exists()


def test_every_command_has_help():
    """Each command is listed in the help with the start of its docstring, and its own --help
    shows all of the docstring (as Typer draws it)."""
    import inspect

    import typer.main

    from profkit.cli import app

    r = cli("--help", env={"COLUMNS": "80"})
    assert r.exit_code == 0
    listing = help_words(r.stdout)
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    docs = {name: inspect.getdoc(command.callback) for name, command in commands.items()}
    assert set(docs) == set(FLAGS) - {"profkit"}
    for command, doc in docs.items():
        assert doc, command
        assert f"{command} {' '.join(doc.split()[:6])}" in listing, command
        h = cli(command, "--help")
        assert h.exit_code == 0 and f"Usage: profkit {command} [OPTIONS]" in h.stdout
        assert " ".join(doc.split()) in help_words(h.stdout) and "--help" in h.stdout, command
    assert cli().exit_code == 0 and "Usage" in cli().stdout
    assert cli("--version").stdout.startswith("profkit ")


# Every command's options and arguments (their flags; an argument by its parameter's name), as
# they were on Click before issue 37 and are on Typer since: none lost, none renamed.
FLAGS = {
    "profkit": "--db --verbose -v --version",
    "run": "--attribution --no-attribution --batch-size --channels-last --compile-mode --context-switches "
    "--cpu-sampling --cudnn-benchmark --db --device --fresh-counters --iters --keep-bn-fp32 --metrics --mode "
    "--name --no-report --report --nproc-per-node --precision --run-to-end --step --timeout --tool --warmup "
    "workload --tf32 --fused-optimizer --cudnn-attention --sdpa-attention",  # the last four: issue 38
    "import": "--db --name --step-range path",
    "runs": "--db --format -f --wide",
    "kernels": "--db --format -f --limit --wide run_ref",
    "summary": "--db --format -f --module-depth --top --wide run_ref",
    "ranges": "--db --format -f --wide run_ref",
    "diff": "--all --db --format -f --limit --match --threshold --wide run_a run_b",
    "compare": "--attribution --no-attribution --batch-size --channels-last --compile-mode --context-switches "
    "--cpu-sampling --cudnn-benchmark --db --device --format -f --fresh-counters --iters --keep-bn-fp32 "
    "--match --metrics --modes --no-report --report --precision --precisions --threshold --timeout --tool "
    "--warmup --wide workload --tf32 --fused-optimizer --cudnn-attention --sdpa-attention",
    "report": "--db --index --match --output -o --threshold --vs run_ref",
    "check": "--baseline --config -c --db --format -f --junit-xml --max-finding --max-launches --max-slowdown "
    "--max-untried-gain-pct --min-tensor-core-coverage --no-fp32-matrix --strict run_ref",
    "bench": "--batch-size --channels-last --compile-mode --cudnn-benchmark --db --device --format -f --iters --keep-bn-fp32 --list "
    "--modes --precision --precisions --rounds --show --timeout --warmup --wide workload --tf32 --fused-optimizer --cudnn-attention --sdpa-attention",
    "doctor": "--db --format -f",
    "sweep": "--address --attribution --no-attribution --batch-size --channels-last --compile-mode --context-switches "
    "--cpu-sampling --cudnn-benchmark --db --device --format -f --fresh-counters --iters --keep-bn-fp32 "
    "--metrics --modes --precisions --timeout --tls-ca-file --tls-cert --tls-key --tools --warmup --workers "
    "--workloads --tf32 --fused-optimizer --cudnn-attention --sdpa-attention",
    "workloads": "",
    "rm": "--db --format -f run_ref",  # issue 37
    "tune": "--attribution --no-attribution --batch-size --channels-last --compile-mode --context-switches "
    "--cpu-sampling --cudnn-attention --cudnn-benchmark --db --device --format -f --fresh-counters --fused-optimizer --iters "
    "--keep-bn-fp32 --metrics --mode --precision --rounds --run --sdpa-attention --step --tf32 --timeout --tool --warmup "
    "--wide workload",  # issue 38
}


def test_every_option_keeps_its_flags():
    import typer.main

    from profkit.cli import app

    group = typer.main.get_command(app)
    found = {"profkit": group, **group.commands}  # type: ignore[attr-defined]

    def flags(command) -> list[str]:
        return sorted(
            name
            for p in command.params
            for name in ([p.name] if p.param_type_name == "argument" else p.opts + p.secondary_opts)
        )

    assert {name: flags(c) for name, c in found.items()} == {
        name: sorted(f.split()) for name, f in FLAGS.items()
    }
    assert next(p for p in group.params if p.name == "db").envvar == "PROFKIT_DB"


def test_help_shows_the_choices():
    """Options with a fixed set of values list them in --help (and the parser checks them)."""
    text = " ".join(cli("run", "--help", env={"COLUMNS": "200"}).stdout.split())
    for choices in (
        "auto|ncu|nsys|torch",
        "fp32|fp16|bf16|amp",
        "eager|torchscript|compile",
        "cuda|cpu",
    ):
        assert choices in text, choices
    for command in ("kernels", "summary", "ranges", "runs", "diff", "compare"):
        assert "table|json|csv" in cli(command, "--help", env={"COLUMNS": "200"}).stdout
    assert "exact|family|op" in cli("diff", "--help", env={"COLUMNS": "200"}).stdout
    assert "default|reduce-overhead|max-autotune" in text and "eager|torchscript|compile" in text


def test_help_imports_nothing_heavy():
    code = (
        "import sys; from profkit.cli import app; from typer.testing import CliRunner; "
        "CliRunner().invoke(app, ['--help']); "
        "print(','.join(m for m in ('torch', 'pandas', 'sqlite_utils', 'ncu_report') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == ""


def test_workloads_lists_builtins():
    out = cli("workloads").stdout
    for name in ("vgg16", "resnet50", "resnet18", "precision_zoo"):
        assert name in out


def _profkit(args, db, columns=None, **kw):
    """profkit as a user starts it, in its own process, with stdout a pipe (not a terminal);
    ``columns``: COLUMNS (else unset)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PROFKIT_DB", "COLUMNS")}
    env.update({"COLUMNS": str(columns)} if columns else {})
    return subprocess.run(
        [sys.executable, "-m", "profkit", "--db", str(db), *args],
        capture_output=True,
        text=True,
        env=env,
        **kw,
    )


def test_piped_tables_fit_80_columns_and_wide_keeps_every_name(db):
    """Piped to a file or `less` with nothing saying how wide, runs, kernels and summary fit 80
    columns (issue 37: never a 1,400-character line); --wide in a window as wide as the
    longest name keeps every character of every name."""
    assert cli("import", str(CSV), "--name", "r", db=db).exit_code == 0
    names = [k["name"] for k in cli_json("kernels", "r", db=db)]
    longest = max(names, key=len)
    assert len(longest) > 1000  # a batch-norm kernel's demangled name
    for args in (["kernels", "r"], ["summary", "r"], ["runs"], ["ranges", "r"]):
        out = _profkit(args, db).stdout
        assert out and max(len(ln) for ln in out.splitlines()) <= 80, args
    kernels = _profkit(["kernels", "r", "--wide"], db, columns=3000).stdout
    assert "…" not in kernels and all(n in kernels for n in names)
    summary = _profkit(["summary", "r", "--wide"], db, columns=3000).stdout
    assert longest in summary
    runs = _profkit(["runs", "--wide"], db, columns=3000).stdout
    assert "…" not in runs and "NVIDIA H100 80GB HBM3" in runs and "2026-" in runs
    assert "resnet18.fp16.eager.iter0" in _profkit(["ranges", "r"], db).stdout


def test_terminal_tables_fit_the_window(db):
    """In an 80-column terminal the kernel names are cut with an ellipsis instead."""
    assert cli("import", str(CSV), "--name", "r", db=db).exit_code == 0
    import re

    out = cli(
        "kernels",
        "r",
        "--limit",
        "5",
        db=db,
        env={"COLUMNS": "80", "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"},
    ).stdout
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert "…" in plain and max(len(line) for line in plain.splitlines()) <= 80


def test_closed_pipe_ends_quietly(db):
    """`profkit kernels RUN | head -1`: no traceback, no 'Exception ignored', exit 0."""
    assert cli("import", str(CSV), "--name", "r", db=db).exit_code == 0
    for args in (
        ["kernels", "r"],
        ["kernels", "r", "-f", "json"],
        ["kernels", "r", "-f", "csv"],
        ["summary", "r"],
    ):
        env = {k: v for k, v in os.environ.items() if k != "PROFKIT_DB"}
        p = subprocess.Popen(
            [sys.executable, "-m", "profkit", "--db", str(db), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert p.stdout.readline()
        p.stdout.close()  # what `head -1` does once it has its line
        err = p.stderr.read().decode()
        assert p.wait(timeout=60) == 0, (args, err)
        assert err == "", (args, err)


def test_a_command_ends_without_pythons_teardown_once_all_is_written(tmp_path):
    """Its exit handlers run, its output and databases are whole (one a library call opened
    too: checkpointed into its file, no -wal left) and its exit status kept; what Python's
    teardown would free is not finalised (0.15-0.3 s of a large import). A stop signal then
    ends it by that signal, never through a traceback. Where a thread of the command's is still
    running, or a profiler watches, the process ends normally."""
    db = tmp_path / "p.db"
    script = (
        "import atexit, os, signal, sys, threading\n"
        "from profkit.cli import main\n"
        "class Left:\n"
        "    def __del__(self):\n"
        "        print('finalised', file=sys.stderr)\n"
        "left = Left()\n"
        "atexit.register(lambda: print('exit handler', file=sys.stderr))\n"
        "if sys.argv[1] == 'thread':  # ends after the main thread has\n"
        "    threading.Thread(target=lambda: (threading.main_thread().join(), print('thread done'))).start()\n"
        "if sys.argv[1] == 'library':  # a store opened by the library, left to the teardown\n"
        "    import profkit\n"
        "    kept = profkit.open_db(sys.argv[3])\n"
        "    kept.import_file(sys.argv[5], name='library')\n"
        "if sys.argv[1] == 'held':  # a connection whose owner is gone, left to the teardown\n"
        "    import sqlite3\n"
        "    held = sqlite3.connect(sys.argv[3])\n"
        "    held.execute('insert into strings (text) values (?)', ['held'])\n"
        "    held.commit()\n"
        "if sys.argv[1] == 'proxy':  # an object whose __class__ warns (torch's deprecated ones)\n"
        "    import warnings\n"
        "    class Proxy:\n"
        "        @property\n"
        "        def __class__(self):\n"
        "            warnings.warn('read', FutureWarning)\n"
        "            return Proxy\n"
        "    proxy = Proxy()\n"
        "    warnings.simplefilter('error', FutureWarning)\n"
        "if sys.argv[1] == 'stopped':  # a stop signal once the command has ended\n"
        "    atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))\n"
        "sys.argv = ['profkit', *sys.argv[2:]]\n"
        "main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PROFKIT_DB"}

    def run(*args):
        return subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, env=env
        )

    def files():
        return sorted(f.name for f in tmp_path.iterdir() if f.name.startswith("p.db"))

    p = run("-", "--db", str(db), "import", str(CSV), "--name", "r")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "r\n" and p.stderr.startswith("imported 162 kernel launches")
    assert "exit handler" in p.stderr and "finalised" not in p.stderr
    assert files() == ["p.db", "p.db-locks"]
    p = run("library", "--db", str(db), "import", str(CSV), "--name", "cli")
    assert p.returncode == 0 and "finalised" not in p.stderr, p.stderr
    assert files() == ["p.db", "p.db-locks"]
    p = run("held", "--db", str(db), "runs")
    assert p.returncode == 0 and files() == ["p.db", "p.db-locks"], p.stderr
    # run, whose library call opens the store itself
    argv = "run precision_zoo --device cpu --tool torch --batch-size 2 --no-report --name ran"
    p = run("-", "--db", str(db), *argv.split())
    assert p.returncode == 0 and files() == ["p.db", "p.db-locks"], p.stderr
    alone = tmp_path / "copy.db"  # the file by itself holds every run and text
    alone.write_bytes(db.read_bytes())
    names = {r for (r,) in sqlite3.connect(alone).execute("select name from runs")}
    assert names == {"r", "library", "cli", "ran"}
    assert sqlite3.connect(alone).execute("select 1 from strings where text = 'held'").fetchone()
    p = run("-", "--db", str(db), "runs", "-f", "json")
    assert p.returncode == 0 and {r["name"] for r in json.loads(p.stdout)} == names
    p = run("-", "--db", str(db), "summary", "nosuch")
    assert p.returncode == 1 and p.stderr.startswith("profkit: error: ")
    assert "exit handler" in p.stderr and "finalised" not in p.stderr
    p = run("proxy", "--db", str(db), "runs")
    assert p.returncode == 0 and p.stderr == "exit handler\n", p.stderr
    p = run("stopped", "--db", str(db), "runs")
    assert p.returncode == -signal.SIGTERM and "Traceback" not in p.stderr, p.stderr
    p = run("thread", "--db", str(db), "runs")
    assert p.returncode == 0 and p.stdout.endswith("thread done\n")
    assert "finalised" in p.stderr  # the normal end
    # under a profiler too, which writes what it found once the program returns
    stats = tmp_path / "runs.prof"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "cProfile",
            "-o",
            str(stats),
            "-m",
            "profkit",
            "--db",
            str(db),
            "runs",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert p.returncode == 0 and stats.stat().st_size > 0, p.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_help_that_cannot_be_written_is_one_line(tmp_path):
    """`profkit --help > /dev/full` (and a command's help, and `profkit` alone): one line on
    stderr and exit 1, never a traceback."""
    env = {k: v for k, v in os.environ.items() if k != "PROFKIT_DB"}
    for args in (["--help"], ["runs", "--help"], []):
        with open("/dev/full", "w") as full:
            p = subprocess.run(
                [sys.executable, "-m", "profkit", *args],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        assert p.returncode == 1, (args, p.stderr)
        assert p.stderr == (
            "profkit: error: the disk is full: cannot write the output: No space left on device\n"
        ), args


def test_failed_commands_leave_no_database(tmp_path):
    """A command that creates the database and then fails removes it again."""
    for argv, message in [
        (["import", str(tmp_path / "missing.csv")], "no such file"),
        (["import", str(CSV), "--name", "12"], "not a usable run name"),
    ]:
        fresh = tmp_path / "fresh.db"
        r = cli(*argv, db=fresh)
        assert r.exit_code != 0 and message in r.stderr and not fresh.exists(), (argv, r.stderr)
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    one_line_error(cli("import", bad, db=tmp_path / "fresh.db"), "not a readable JSON trace")
    assert not (tmp_path / "fresh.db").exists()


def test_user_text_in_backticks_is_not_taken_for_a_flag():
    from profkit.cli import flag
    from profkit.errors import WorkloadError

    exc = WorkloadError(
        "workload build(spec) failed: ValueError: set `foo_bar` first", "Use `device` cpu."
    )
    assert (
        exc.one_line(flag)
        == "workload build(spec) failed: ValueError: set `foo_bar` first. Use --device cpu."
    )


def test_markup_in_names_is_printed_as_it_is(capsys):
    """Rich markup characters in what the files say (GPU names, workloads, kernel names) are text."""
    from profkit import render
    from profkit.records import RunRecord, Summary, TopKernel

    run = RunRecord(
        id=1,
        name="r",
        workload="[red]wl",
        precision="fp16",
        mode="eager",
        tool="torch",
        gpu_name="GPU [red]X[/red]",
    )
    top = TopKernel(
        name="k<[lambda() (instance 3)]>",
        launches=1,
        total_ns=5,
        pct=100.0,
        precision="fp16",
        tensor_core=False,
        evidence="name",
    )
    s = Summary(
        run="r",
        activity="kernel",
        kernels=1,
        gpu_time_ns=5,
        tensor_core_kernels=0,
        tensor_core_time_ns=0,
        tensor_core_time_pct=0.0,
        unclassified_time_ns=0,
        time_by_precision_ns={"fp16": 5},
        kernels_by_precision={"fp16": 1},
        time_by_family_ns={"unknown": 5},
        evidence={"name": 1},
        time_by_evidence_ns={"name": 5},
        top_kernels=[top],
        memory_ops={},
    )
    # the kernel's full name (a table's label is its function's: k)
    render.summary(run, s, "table", wide=True)
    out = capsys.readouterr().out
    assert "[red]wl" in out and "GPU [red]X[/red]" in out and "k<[lambda() (instance 3)]>" in out


def test_launch_index_never_cut(monkeypatch, capsys):
    """In a narrow terminal a run of 123,456 launches still shows every launch's number whole."""
    from profkit import render
    from profkit.parse.schema import kernel_row
    from profkit.records import RunRecord

    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    rows = [
        {
            **kernel_row(123455, "kernel", "k" * 300, "k", duration_ns=5),
            "precision": "fp16",
            "tensor_core": False,
            "family": None,
            "evidence": "name",
            "evidence_detail": "",
        }
    ]
    render.kernels(RunRecord(id=1, name="big", kernel_count=123456), rows, "table")
    out = capsys.readouterr().out
    assert "123455" in out and "…" in out


def test_help_into_a_closed_pipe_is_quiet():
    """`profkit --help | head -1`: exit 0, nothing on stderr (Rich and Click exit 1 there)."""
    import subprocess
    import sys

    for args in (["--help"], ["kernels", "--help"]):
        p = subprocess.run(
            f"{sys.executable} -m profkit {' '.join(args)} | head -1 >/dev/null; "
            "echo ${PIPESTATUS[0]}",
            shell=True,
            executable="/bin/bash",
            capture_output=True,
            text=True,
        )
        assert p.stdout.strip() == "0" and p.stderr == "", (args, p.stdout, p.stderr)


def test_a_foreign_warning_inside_a_command_is_shown_once_and_the_command_ends():
    """A library's own warning (not profkit's) raised inside a command is printed once to
    stderr; showing it must not feed the list being shown (that looped without end)."""
    import threading
    import warnings

    from profkit import cli as cli_module

    calls = []

    @cli_module.handles_errors
    def command() -> None:
        warnings.warn("port 8787 is already in use", UserWarning, stacklevel=2)
        calls.append(1)

    done = threading.Event()
    worker = threading.Thread(target=lambda: (command(), done.set()), daemon=True)
    worker.start()
    assert done.wait(10) and calls == [1]


def test_help_shows_brackets_as_written():
    """Typer's help reads Rich markup: a check file's [sections] and a finding's [[finding]] are
    text in profkit's help, not markup that vanishes."""
    text = help_words(cli("check", "--help", env={"COLUMNS": "200"}).stdout)
    assert (
        "[tensor_cores] min_coverage" in text
        and "[baseline] run" in text
        and "[[finding]] ids" in text
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["summary", "r", "--top", "x"],
        ["summary"],
        ["summary", "r", "extra"],
        ["nosuch"],
        ["runs", "--nope"],
        ["--nope"],
        ["run", "w", "--tool", "x"],
        ["check", "r", "--min-tensor-core-coverage", "101"],
        ["import"],
    ],
    ids=" ".join,
)
def test_usage_errors_are_one_line_without_typers_panel(argv, db):
    """Typer's usage errors come as one line on stderr (never its boxed panel), exit 2, nothing
    on stdout."""
    r = cli(*argv, db=db)
    one_line_error(r, "", 2)
    assert r.stdout == "" and "╭" not in r.stderr and "(see: profkit" in r.stderr
