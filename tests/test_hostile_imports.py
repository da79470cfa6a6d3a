"""Hostile exports, round three (issue 34, items 6, 10, 11, 12 and 14): real captures edited so
that an importer would run without end, store what no capture holds, count a launch twice, lose
a name, or fail with a traceback or with the wrong words. Each is refused in one line naming the
file (and the table, event or id), with the database as it was; and a stop signal ends an import
within moments even inside a long SQLite statement, leaving nothing of it stored."""

from __future__ import annotations

import errno
import gzip
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import profkit
from profkit.errors import BadExport, EmptyCapture, StoreError
from profkit.parse import gunzip, load
from profkit.parse.schema import check_row, kernel_row

from .conftest import DATA, cli, cli_json, one_line_error
from .test_bad_inputs import NCU_CSV, NSYS, kineto_edit, ncu_edit, nsys_edit, seeded, unchanged  # noqa: F401 (seeded: a fixture)
from .test_hostile_parsers import content, refused

PROFKIT = [sys.executable, "-m", "profkit"]
TRAIN = DATA / "nsys" / "nsys_resnet18_train_amp.sqlite.gz"  # 823 kB unpacked
TORCH_RUN = DATA / "torch" / "torch_run_resnet18_train_amp.json.gz"  # kernels, ranges, operators' input types
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


def _first_kernel(trace: dict) -> tuple[int, dict]:
    return next((i, e) for i, e in enumerate(trace["traceEvents"]) if e.get("cat") == "kernel")


def _at(tmp: Path, statements: str) -> Path:
    """The nsys export with ``statements`` (a script) run on it."""
    path = nsys_edit(tmp)
    con = sqlite3.connect(path)
    con.executescript(statements)
    con.commit()
    con.close()
    return path


# The kernel table replaced by a view of itself that never ends (a recursive CTE with no bound).
RECURSIVE_VIEW = f"""
    alter table {KERNEL} rename to K0;
    create view {KERNEL} as with recursive r(n) as (select 0 union all select n + 1 from r) select K0.* from K0, r;"""


# ------------------------------------------------------------------ item 10: Kineto held to the others' checks
def _kernel_edit(key: str, value):
    def edit(trace: dict) -> None:
        _first_kernel(trace)[1]["args"][key] = value
    return edit


@pytest.mark.parametrize("key, value, shown, fault", [
    ("grid", [-1, 2, 1], "[-1, 2, 1]", "not three whole numbers from 0 to 2^31 - 1"),
    ("grid", "abc", "'abc'", "not three whole numbers from 0 to 2^31 - 1"),
    ("grid", [784, 2], "[784, 2]", "not three whole numbers from 0 to 2^31 - 1"),
    ("grid", [784.5, 2, 1], "[784.5, 2, 1]", "not three whole numbers from 0 to 2^31 - 1"),
    ("block", [8, 8, 2 ** 40], "[8, 8, 1099511627776]", "not three whole numbers from 0 to 2^31 - 1"),
    ("block", [True, 8, 1], "[True, 8, 1]", "not three whole numbers from 0 to 2^31 - 1"),
    ("stream", -7, "-7", "not a whole number from 0 to 2^63 - 1"),
    ("stream", "x", "'x'", "not a whole number from 0 to 2^63 - 1"),
    ("device", "gpu0", "'gpu0'", "not a whole number from 0 to 2^63 - 1"),
    ("device", -1, "-1", "not a whole number from 0 to 2^63 - 1"),
    ("device", 1.5, "1.5", "not a whole number from 0 to 2^63 - 1"),
], ids=["grid-negative", "grid-text", "grid-two", "grid-fraction", "block-huge", "block-bool", "stream-negative",
        "stream-text", "device-text", "device-negative", "device-fraction"])
def test_kineto_bad_grid_block_stream_device_is_refused(seeded, tmp_path, key, value, shown, fault):
    n = _first_kernel(json.loads(gzip.decompress((DATA / "torch" / "kineto_resnet18_fp16.json.gz").read_bytes())))[0]
    refused(seeded, kineto_edit(tmp_path, _kernel_edit(key, value)),
            f"edited.json: traceEvents[{n}] (kernel 'void implicit_convolve_sgemm<__half, __half, 1024, 5, 5, 3, '): "
            f"args.{key} is {shown}, {fault}")


def test_kineto_exact_duplicate_event_is_refused(seeded, tmp_path):
    """It was counted twice."""
    def edit(trace: dict) -> None:
        i, e = _first_kernel(trace)
        trace["traceEvents"].append(json.loads(json.dumps(e)))

    path = kineto_edit(tmp_path, edit)
    n = len(json.loads(path.read_text())["traceEvents"]) - 1
    refused(seeded, path, f"edited.json: traceEvents[{n}] (kernel 'void implicit_convolve_sgemm<__half, __half, 1024, "
                          "5, 5, 3, ') repeats an earlier event: the same kernel at the same time on the same stream. "
                          "Is it two traces merged?")


def test_kineto_kernel_on_another_stream_at_the_same_time_is_no_duplicate(tmp_path):
    def edit(trace: dict) -> None:
        e = json.loads(json.dumps(_first_kernel(trace)[1]))
        e["args"]["stream"] += 1
        trace["traceEvents"].append(e)

    assert profkit.open_db(tmp_path / "k.db").import_file(kineto_edit(tmp_path, edit)).kernel_count == 325


def test_every_importer_is_held_to_the_same_launch_values():
    """The store's check of every row (the importers of rows: ncu, Kineto) holds them too."""
    check_row(kernel_row(0, "kernel", "k", "k", grid_x=2 ** 31 - 1, stream=0, device=0))
    for column, value in [("grid_x", -1), ("block_z", 2 ** 31), ("stream", -7), ("device", "0"), ("grid_y", 1.0)]:
        with pytest.raises(BadExport, match=f"launch 0 has {column} = {value!r}, not a whole number from 0 to "):
            check_row(kernel_row(0, "kernel", "k", "k", **{column: value}))


# ------------------------------------------------------------------ item 12: long numbers, lone surrogates
def test_kineto_number_of_5001_digits_is_one_line(seeded, tmp_path):
    """Was a ValueError traceback (Python's limit on converting long integers)."""
    def edit(trace: dict) -> None:
        _first_kernel(trace)[1]["args"]["registers per thread"] = 10 ** 5000

    path = tmp_path / "edited.json"
    trace = json.loads(gzip.decompress((DATA / "torch" / "kineto_resnet18_fp16.json.gz").read_bytes()))
    edit(trace)
    with sys_digits(6000):
        path.write_text(json.dumps(trace))
    refused(seeded, path, "edited.json is not a readable JSON trace: a number of more than 4,300 digits in the value "
                          "at character")


class sys_digits:
    """Python's limit on converting long integers, raised for a while (to write the trace)."""

    def __init__(self, n: int):
        self.n, self.was = n, sys.get_int_max_str_digits()

    def __enter__(self):
        sys.set_int_max_str_digits(self.n)

    def __exit__(self, *exc):
        sys.set_int_max_str_digits(self.was)


@pytest.mark.parametrize("column, value, message", [
    ("gpu__time_duration.sum", "9" * 5001, "gpu__time_duration.sum is '99999999999"),
    ("Grid Size", "(" + "9" * 5001 + ", 1, 1)", "Grid Size is '(9999999999"),
    ("Stream", "9" * 5001, "Stream is '9999999999"),
])
def test_ncu_number_of_5001_digits_is_one_line(seeded, tmp_path, column, value, message):
    refused(seeded, ncu_edit(tmp_path, column, value), f"edited.csv row 3: {message}")


def test_kineto_lone_surrogates_are_stored_as_replacement_characters(tmp_path):
    """JSON can say "\\ud800" (half of a pair, no character): names, ranges, input types and the
    GPU's name hold U+FFFD there, as the nsys importer shows bytes that are not UTF-8; the import
    and every command that prints them work."""
    trace = json.loads(gzip.decompress(TORCH_RUN.read_bytes()))
    _first_kernel(trace)[1]["name"] = "k\ud800x"
    for e in trace["traceEvents"]:
        if e.get("cat") == "user_annotation":
            e["name"] = e["name"] + "\udfff"
        if e.get("cat") == "cpu_op" and e.get("args", {}).get("Input type"):
            e["args"]["Input type"] = ["c10::Half\udc00" if t else t for t in e["args"]["Input type"]]
    trace["deviceProperties"][0]["name"] = "H100\ud83d"
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(trace))
    db = tmp_path / "p.db"
    r = cli("import", path, "--name", "s", db=db)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    rows = cli_json("kernels", "s", db=db)
    assert rows[0]["name"] == "k\ufffdx"
    assert any(row["nvtx_path"] and "\ufffd" in row["nvtx_path"] for row in rows)
    assert any(row["input_types"] and "c10::Half\ufffd" in row["input_types"] for row in rows)
    assert cli_json("runs", db=db)[0]["gpu_name"] == "H100\ufffd"
    for command in (["kernels", "s"], ["summary", "s"], ["ranges", "s"], ["runs"]):
        out = cli(*command, db=db)
        assert out.exit_code == 0 and "Traceback" not in out.output, (command, out.output)


def test_nsys_string_that_is_no_utf8_is_shown_with_replacement_characters(tmp_path):
    """An unpaired surrogate in StringIds (its CESU-8 bytes, no UTF-8): U+FFFD, no traceback."""
    path = nsys_edit(tmp_path, f"update StringIds set value = cast(x'6beda08078' as text) "
                               f"where id = (select demangledName from {KERNEL} where rowid = 1)")
    db = tmp_path / "p.db"
    assert cli("import", path, "--name", "s", db=db).exit_code == 0
    names = {row["name"] for row in cli_json("kernels", "s", db=db)}
    assert "k\ufffd\ufffd\ufffdx" in names
    assert "Traceback" not in cli("summary", "s", db=db).output


def test_ncu_csv_with_a_surrogate_is_one_line(seeded, tmp_path):
    path = ncu_edit(tmp_path, "Kernel Name", "k")
    path.write_bytes(path.read_bytes().replace(b'"k"', b'"k\xed\xa0\x80x"', 1))
    refused(seeded, path, "edited.csv is not a text CSV file")
