"""Issue 22's acceptance, "behaviour unchanged": what profkit prints as JSON for every committed
capture (`runs`, `kernels`, `summary`, `ranges`, `diff` in each --match, `bench --show`) was
recorded before the refactor moved anything (tests/data/behaviour/golden.json.gz, by
tests/data/behaviour/record.py); here the same recording is made again and must equal it.

Later issues change the output on purpose; each such change is named here rather than
recorded again, so that everything else is still held to the recording: ``ADDED`` lists the
keys a later issue added to the JSON (a key so named may be new at any depth), ``CHANGED``
the JSON paths whose recorded value a later issue changed, each with why: ``fnmatch``
patterns over the paths :func:`first_difference` reports, with ``[]`` for any list index
(``.json[].precision``); a pattern written ``COMMAND :: PATH`` holds for that one command's output
only (``diff A B --match family :: .json.rows``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import DATA

_spec = importlib.util.spec_from_file_location("behaviour_record", DATA / "behaviour" / "record.py")
assert _spec is not None and _spec.loader is not None
recorder = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recorder)

GOLDEN = recorder.load()

# One recording (a session fixture, minutes of CPU) for the whole module: under parallel workers
# (`pytest -n auto --dist loadgroup`) every test here goes to the same worker, which makes it once.
pytestmark = pytest.mark.xdist_group("behaviour")

# Keys added to profkit's JSON output on purpose since the recording, with the issue.
ADDED: dict[str, str] = {
    "module": "issue 23: the module that ran a kernel's operator (kernel table)",
    "time_by_evidence_ns": "issue 23: the summary's time whose precision each kind of evidence decided",
    "module_type": "issue 23: that module's class (kernel table)",
    "shapes": "issue 23: the operator's input shapes (kernel table)",
    "phase": "issue 23: forward, backward or optimizer (kernel table)",
    "matrix_work": "issue 23: summary's tensor-core coverage of matrix work (GEMM, conv, attention)",
    "matrix_work_a": "issue 23: the diff's totals, side A's tensor-core coverage of matrix work",
    "matrix_work_b": "issue 23: the diff's totals, side B's tensor-core coverage of matrix work",
    "modules": "issue 23: summary's GPU time by module (null without module attribution)",
    "time_by_precision_a_ns": "issue 23: a diff row's time per precision, side A",
    "time_by_precision_b_ns": "issue 23: a diff row's time per precision, side B",
    "matrix_tensor_core_pct_a": "issue 23: a diff row's tensor-core coverage of its matrix work, side A",
    "matrix_tensor_core_pct_b": "issue 23: a diff row's tensor-core coverage of its matrix work, side B",
    "fused_time_a_ns": "issue 36: of a kind compile removed, the time launched by operators B's kernels fused",
    "fused_ops": "issue 36: those operators",
    "fused_into": "issue 36: B's generated kernels that fused them",
    "fusion_traced": "issue 36: whether A's removed kernels carry the operators that launched them",
    "noise_bound": "issue 37: the diff's totals: a CPU run of fewer than 5 measured iterations has noise-bound times",
    "tuning": "issue 38: summary's latest tuning of the run (profkit tune; null where it has none)",
}
# JSON paths whose recorded values changed on purpose since the recording: pattern -> why, or
# (why, the recorded values the change may come from).
CHANGED: dict[str, str | tuple[str, frozenset[Any]]] = {
    ".json[].evidence": (
        "issue 23: the evidence is what decided the precision: the launching operator's "
        "input types `dtypes` (was `name` for Triton and SDPA kernels, `none` for the rest); off "
        "the tensor cores on ncu runs, the name rule (`name`, was `metrics`: the tensor-path "
        "counters decided only that no tensor core was used)",
        frozenset({"name", "none", "metrics"}),
    ),
    ".json[].evidence_detail": "issue 23: says the launching operator's input types gave the precision",
    ".json.evidence": "issue 23: the summary's launches per evidence, as .json[].evidence",
    ".json.time_by_precision_ns": "issue 23: the summary's time per precision, as .json[].precision",
    ".json.kernels_by_precision": "issue 23: the summary's launches per precision, as .json[].precision",
    ".json.top_kernels[].evidence": (
        "issue 23: as .json[].evidence, in the summary's top kernels",
        frozenset({"name", "none", "metrics"}),
    ),
    ".json.top_kernels[].precision": (
        "issue 23: as .json[].precision, in the summary's top kernels",
        frozenset({"unknown"}),
    ),
    ".json[].precision": (
        "issue 23: kernels whose names and counters say no precision take the launching "
        "operator's input types",
        frozenset({"unknown"}),
    ),
    ".json.rows[].precision_a": "issue 23: as .json[].precision, in the diff's rows",
    ".json.totals.time_by_precision_?_ns": "issue 23: as .json[].precision, in the diff's totals",
    ".json.rows[].precision_b": "issue 23: as .json[].precision, in the diff's rows",
    ".json[].family": (
        "issue 24: convolutions run as implicit GEMMs (cuDNN xmma fprop/dgrad/wgrad, CUTLASS conv "
        "kernels) are family conv, not gemm (rule conv_family); issue 36: cuDNN's first-layer "
        "convolution is conv, opaque copies and gathers memory, cuDNN's dQ conversion attention",
        frozenset({"gemm", None}),
    ),
    ".json[].tensor_core": (
        "issue 36: cuDNN's first-layer convolution runs on tensor cores (its HMMA tile), opaque "
        "copies, gathers and cuDNN's dQ conversion do not",
        frozenset({None}),
    ),
    ".json.rows[].tensor_core_pct_?": "issue 36: as .json[].tensor_core, in the diff's rows",
    ".json.totals.replaced_by_fusion": (
        "issue 36: what compile removed is every kind of A's kernels without "
        "counterpart in B, whatever its family (was: element-wise, norm, layout "
        "and memory kinds only)"
    ),
    ".json.tensor_core_kernels": "issue 36: as .json[].tensor_core, in the summary's launches on tensor cores",
    ".json.tensor_core_time_pct": "issue 36: as .json[].tensor_core, in the summary's time on tensor cores",
    ".json.tensor_core_time_ns": "issue 36: as .json[].tensor_core, in the summary's time on tensor cores",
    ".json.unclassified_time_ns": "issue 36: as .json[].tensor_core, the summary's time whose tensor-core use is unknown",
    ".json.totals.tensor_core_time_pct_?": "issue 36: as .json[].tensor_core, in the diff's totals",
    ".json.totals.tensor_core_time_?_ns": "issue 36: as .json[].tensor_core, in the diff's totals",
    ".json.rows[].family": "issue 24: as .json[].family, in the diff's rows (conv, not gemm)",
    ".json.rows[].name": (
        "issue 24: with --match family, a kernel no work rule knows is its short name with what "
        "differs between variants wildcarded as `*` (tile shapes, an element type, lone numbers); "
        "digits inside a word stay (max_pool2d, bn_fw_inf_1C11): was every digit as `#`"
    ),
    (
        "diff attention.attention_zoo_fp16.ncu.raw attention.attention_zoo_bf16.ncu.raw --match family :: "
        ".json"
    ): (
        "issue 24: the fmha_cutlassF kernels of fp16 and bf16 are one family now (an element type that is a "
        "part of its own is wildcarded): one row 'same' instead of one 'added' and one 'removed'"
    ),
    ".json.time_by_family_ns": "issue 24: the summary's time per family, as .json[].family (conv, not gemm)",
    **{
        f"diff torch.cpu_resnet18_fp32 torch.cpu_resnet18_bf16 --match {m} :: {path}": (
            "issue 37: CPU runs of 2 and 1 measured iterations: their times are noise, so a row is changed only where "
            "its calls are, and a note says so"
        )
        for m in ("exact", "family", "op", "module")
        for path in (".json.rows[].status", ".json.totals.status", ".json.totals.notes")
    },
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, Any]:
    """Every capture imported into a fresh database in a temporary folder, and every output, as
    stored (long kernel lists shortened the same way)."""
    return recorder.compact(_without_added(recorder.record(tmp_path_factory.mktemp("behaviour"))))


def _without_added(value: Any) -> Any:
    """The output less the keys named in ADDED, at any depth: the recording has none, and the
    long kernel lists are compared by a hash of their middle rows."""
    if isinstance(value, dict):
        return {k: _without_added(v) for k, v in value.items() if k not in ADDED}
    if isinstance(value, list):
        return [_without_added(v) for v in value]
    return value


def first_difference(got: Any, want: Any) -> str | None:
    """Where ``got`` first differs from ``want`` (a JSON path, both values), or None."""
    return next(differences(got, want), None)


def differences(got: Any, want: Any, path: str = "") -> Iterator[str]:
    """Every place where ``got`` differs from ``want``, in order (a JSON path, both values): a
    value of another type, or a list of another length, is one difference, whatever is below."""
    if type(got) is not type(want):  # 1 and 1.0, or 0 and False, are a change of output too
        yield f"{path or '$'}: {got!r} ({type(got).__name__}), recorded {want!r} ({type(want).__name__})"
    elif isinstance(want, dict):
        for key in want:
            if key not in got:
                yield f"{path}.{key}: missing, recorded {want[key]!r}"
            else:
                yield from differences(got[key], want[key], f"{path}.{key}")
        extra = [k for k in got if k not in want and k not in ADDED]
        if extra:
            yield f"{path or '$'}: new key {extra[0]!r} = {got[extra[0]]!r}"
    elif isinstance(want, list):
        for i, (g, w) in enumerate(zip(got, want)):
            yield from differences(g, w, f"{path}[{i}]")
        if len(got) != len(want):
            yield f"{path or '$'}: {len(got)} items, recorded {len(want)}"
    elif got != want:
        yield f"{path or '$'}: {got!r}, recorded {want!r}"


def _intended(found: str, want: Any, command: str = "") -> str | None:
    """The path (``found``'s or one above it) at which CHANGED names the difference ``found``
    (from a value it allows), or None: a pattern names the values below its path too."""
    import re
    from fnmatch import fnmatchcase

    path = found.split(":", 1)[0]
    steps = re.findall(r"\.[^.\[]+|\[\d+\]", path)
    for n in range(len(steps), 0, -1):
        at = "".join(steps[:n])
        where = re.sub(r"\[\d+\]", "[]", at)  # any list index is written []
        for key, why in CHANGED.items():
            only, _, pattern = key.rpartition(" :: ")
            if only and only != command:
                continue
            if fnmatchcase(where, pattern.replace("[]", "[[][]]")):
                if isinstance(why, str) or (n == len(steps) and _at(want, at) in why[1]):
                    return at
    return None


def _at(value: Any, where: str) -> Any:
    """The value at JSON path ``where`` (``.json[3].precision``)."""
    import re

    for key, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", where):
        value = value[int(index)] if index else value[key]
    return value


def check(got: Any, want: Any, what: str, command: str) -> None:
    """``got`` equals ``want`` but for the changes made on purpose (CHANGED): everything below
    the path at which one is named is left out of the comparison. One walk of both."""
    made: list[str] = []  # the paths of the changes made on purpose found so far
    for found in differences(got, want):
        path = found.split(":", 1)[0]
        if any(path == at or path.startswith((f"{at}.", f"{at}[")) for at in made):
            continue
        at = _intended(found, want, command)
        if at is None:
            if ".sha256" in found:
                found += (
                    f" (the rows between the first and last {recorder.EDGE} differ; record.py --out "
                    "FILE records them in full with FULL_ROWS raised)"
                )
            raise AssertionError(
                f"{what}: `profkit {command} -f json` differs from the recording at {found}"
            )
        made.append(at)


def test_every_committed_capture_is_recorded():
    """Each file under tests/data is a recorded capture or named in NOT_CAPTURES (with what it is)."""
    left_out = []
    for f in sorted(DATA.rglob("*")):
        rel = f.relative_to(DATA).as_posix()
        if (
            f.is_file()
            and rel not in recorder.CAPTURES
            and not any(
                rel.startswith(k) if k.endswith("/") else k in rel for k in recorder.NOT_CAPTURES
            )
        ):
            left_out.append(rel)
    assert left_out == [], (
        "captures the recording leaves out (add them to CAPTURES and record again)"
    )
    names = [recorder.run_name(c) for c in recorder.CAPTURES]
    assert len(set(names)) == len(names)
    assert list(GOLDEN["captures"])[: len(names)] == names


def test_runs(recorded):
    check(recorded["runs"], GOLDEN["runs"], "every run", "runs")


@pytest.mark.parametrize("run", list(GOLDEN["captures"]))
def test_kernels_summary_ranges(recorded, run):
    assert run in recorded["captures"], f"{run}: not recorded now"
    for command, want in GOLDEN["captures"][run].items():
        check(recorded["captures"][run][command], want, run, f"{command} {run}")


@pytest.mark.parametrize("pair", list(GOLDEN["diff"]))
def test_diff(recorded, pair):
    a, b, match = pair.split()
    assert pair in recorded["diff"], f"{pair}: not recorded now"
    check(
        recorded["diff"][pair],
        GOLDEN["diff"][pair],
        f"{a} against {b}",
        f"diff {a} {b} --match {match}",
    )


def test_bench_show(recorded):
    check(recorded["bench"], GOLDEN["bench"], "tests/data/behaviour/bench.db.gz", "bench --show 1")


def test_the_check_names_the_first_difference():
    """The messages above: a changed, missing, new or retyped field, and a shorter list."""
    want = {
        "exit": 0,
        "json": [{"launch_id": 0, "duration_ns": 5}, {"launch_id": 1, "duration_ns": 7}],
    }
    assert first_difference(want, want) is None
    got = {
        "exit": 0,
        "json": [{"launch_id": 0, "duration_ns": 5}, {"launch_id": 1, "duration_ns": 8}],
    }
    assert first_difference(got, want) == ".json[1].duration_ns: 8, recorded 7"
    assert (
        first_difference({"exit": 0, "json": want["json"][:1]}, want)
        == ".json: 1 items, recorded 2"
    )
    assert first_difference({"exit": 0}, want).startswith(".json: missing")
    assert first_difference({**want, "x": 1}, want) == "$: new key 'x' = 1"
    assert (
        first_difference({"exit": 0.0, "json": want["json"]}, want)
        == ".exit: 0.0 (float), recorded 0 (int)"
    )
    with pytest.raises(
        AssertionError,
        match=r"r18: `profkit kernels r18 -f json` differs from the recording at "
        r"\.json\[1\]\.duration_ns: 8, recorded 7",
    ):
        check(got, want, "r18", "kernels r18")


def test_named_changes_are_compared_without_the_rest():
    """A path in CHANGED is left out of the comparison, and nothing else is."""
    want = {"exit": 0, "json": [{"a": 1, "b": 2}]}
    got = {"exit": 0, "json": [{"a": 5, "b": 2}]}
    CHANGED[".json[].a"] = "test"
    try:
        check(got, want, "r", "x")  # passes: the change is named
        with pytest.raises(AssertionError):
            check({"exit": 0, "json": [{"a": 5, "b": 3}]}, want, "r", "x")
        # a change named at a path covers everything below it, in every row, and only that
        rows = [{"a": {"x": i, "y": [i]}, "b": 2} for i in range(3)]
        check(
            {"exit": 0, "json": rows}, {"exit": 0, "json": [{**r, "a": 0} for r in rows]}, "r", "x"
        )
        with pytest.raises(AssertionError, match=r"at \.json\[2\]\.b: 3, recorded 2"):
            check(
                {"exit": 0, "json": [*rows[:2], {**rows[2], "b": 3}]},
                {"exit": 0, "json": [{**r, "a": 0} for r in rows]},
                "r",
                "x",
            )
    finally:
        del CHANGED[".json[].a"]
