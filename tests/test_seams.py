"""Issue 22, typed seams: what crosses between profkit's layers is a typed record, and the
facts one layer writes are the ones the next reads (an imported run's report says where the
capture came from)."""

from __future__ import annotations

import hashlib
import json
import re
from html import unescape
from pathlib import Path

import profkit
from profkit.report import model

from .conftest import NCU_DATA


def _page_text(path: Path) -> str:
    return unescape(re.sub(r"<[^>]+>", " ", path.read_text()))


def test_report_of_an_imported_run_says_where_it_came_from(tmp_path):
    src = NCU_DATA / "resnet18_fp16_eager.raw.csv.gz"
    db = profkit.open_db(tmp_path / "r.db")
    run = db.import_file(src, name="r18")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    head = model.header(db.store, run)
    assert head["imported_from"] == str(src.resolve()) and head["imported_sha256"] == digest
    text = _page_text(run.report(tmp_path / "r18.html"))
    assert "imported from" in text and str(src.resolve()) in text and digest in text
    # the side-by-side page names both sides' files
    other = db.import_file(NCU_DATA / "resnet18_bf16_torchscript.raw.csv.gz", name="ts")
    vs = _page_text(run.report(tmp_path / "vs.html", vs=other))
    assert src.name in vs and "resnet18_bf16_torchscript.raw.csv.gz" in vs


def test_diff_totals_are_a_typed_record(tmp_path, diff_dir):
    from dataclasses import fields, is_dataclass

    from profkit.analyze.diff import DiffTotals, FusedKernel, StatusCounts

    from .conftest import cli_json

    db = profkit.open_db(tmp_path / "d.db")
    a = db.import_file(diff_dir / "r18_fp16_eager_torch.json.gz", name="eager")
    b = db.import_file(diff_dir / "r18_fp16_compile_torch.json.gz", name="compile")
    d = a.diff(b, match="family")
    t = d.totals
    assert isinstance(t, DiffTotals) and isinstance(t.status, StatusCounts)
    assert t.fused_kernels and all(isinstance(x, FusedKernel) for x in t.fused_kernels)
    # one serialisation: the record's to_dict() is the command's JSON, field for field and in order
    out = cli_json("diff", "eager", "compile", "--match", "family", db=db.path)
    assert (
        list(out["totals"]) == [f.name for f in fields(DiffTotals)] and out["totals"] == t.to_dict()
    )
    assert all(not is_dataclass(v) for v in t.to_dict().values())
    # each side's figures by name
    assert (
        t.side("b").kernels == t.kernels_b
        and t.side("a").time_by_precision_ns == t.time_by_precision_a_ns
    )


def test_run_info_is_a_typed_record(tmp_path):
    from profkit.records import RunInfo, RunRecord

    src = NCU_DATA / "resnet18_fp16_eager.raw.csv.gz"
    db = profkit.open_db(tmp_path / "i.db")
    run = db.import_file(src, name="r18")
    info = run.info
    assert (
        isinstance(info, RunInfo) and info.imported_from == str(src.resolve()) and info.extra == {}
    )
    assert (
        info.profkit_version == profkit.__version__
        and isinstance(info.notes, list)
        and info.error is None
    )
    # the mapping view and to_dict() are the JSON stored, in its order
    stored = next(db.store.query("select info from runs where id = ?", [run.id]))["info"]
    assert (
        json.dumps(info.to_dict()) == stored
        and dict(info) == json.loads(stored)
        and info["notes"] == info.notes
    )
    # keys it does not know (an older or newer database's) are kept, in place; nulls stay null
    old = RunInfo.from_dict({"zeta": 1, "imported_from": "/x.csv", "error": None, "alpha": [2]})
    assert old.imported_from == "/x.csv" and old.extra == {"zeta": 1, "alpha": [2]}
    assert list(old.to_dict().items()) == [
        ("zeta", 1),
        ("imported_from", "/x.csv"),
        ("error", None),
        ("alpha", [2]),
    ]
    assert RunRecord(id=1, name="r", info={"world_size": 2}).info.world_size == 2
    # a failed run's error reads by name
    failed = db.store.reserve(None, "broken", {"source": "run"}, status="running")
    db.store.end_run(failed.id, "failed", "it broke")
    assert db.store.get_run(failed.id).info.error == "it broke"


def test_precision_kind_and_evidence_are_literal_types(tmp_path, monkeypatch):
    import dataclasses
    from typing import get_args, get_type_hints

    import pytest

    from profkit import classify
    from profkit.parse.schema import (
        EVIDENCE,
        KINDS,
        PRECISIONS,
        ClassifiedRow,
        Evidence,
        KernelRow,
        Kind,
        Precision,
    )
    from profkit.records import TopKernel

    assert (
        get_args(Precision) == PRECISIONS
        and get_args(Evidence) == EVIDENCE
        and get_args(Kind) == KINDS
    )
    assert get_type_hints(KernelRow)["kind"] == Kind
    hints = get_type_hints(ClassifiedRow)
    assert (hints["precision"], hints["evidence"]) == (Precision, Evidence)
    verdict = get_type_hints(classify.Verdict)
    assert (verdict["precision"], verdict["evidence"]) == (Precision, Evidence)
    assert get_type_hints(TopKernel)["precision"] == Precision | None
    # every stored verdict is one of the values
    db = profkit.open_db(tmp_path / "l.db")
    run = db.import_file(NCU_DATA / "precision_zoo.raw.csv.gz", name="zoo")
    rows = list(run.iter_kernels())
    assert rows and all(
        r["kind"] in KINDS and r["precision"] in PRECISIONS and r["evidence"] in EVIDENCE
        for r in rows
    )
    # the rules are a frozen record, and a rules file naming a precision that is not one is refused
    r = classify.rules()
    assert isinstance(r, classify.Rules) and set(r.counters.values()) <= set(PRECISIONS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.counters = {}  # type: ignore[misc]
    bad = tmp_path / "rules.toml"
    bad.write_text(classify.RULES_PATH.read_text().replace('f16 = "fp16"', 'f16 = "fp17"', 1))
    monkeypatch.setattr(classify, "RULES_PATH", bad)
    classify.rules.cache_clear()
    try:
        with pytest.raises(ValueError, match="fp17"):
            classify.rules()
    finally:
        monkeypatch.undo()
        classify.rules.cache_clear()
