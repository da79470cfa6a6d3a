"""Issue 23's findings on real captures: TF32 left off, fp32 matrix work outside autocast in an
AMP run (and fp32_in_half_run quiet there), and host synchronisations inside the step (the
runtime calls the nsys and torch.profiler importers keep in ``host_syncs``). Each fires on a
capture that has the problem and stays quiet on one that does not."""

from __future__ import annotations

import gzip
import os
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

import profkit
from profkit.analyze.findings import findings
from profkit.parse.schema import host_sync_call

from . import chromium
from .conftest import DATA, NCU_DATA, NSYS_DATA, cli, cli_json

STEPS = DATA / "steps"
AMP_CAPTURES = {
    "bert_amp_ncu": STEPS / "bert_encoder_train_amp.ncu.raw.csv.gz",
    "bert_amp_ncu_every": STEPS / "bert_encoder_train_amp.ncu-every.raw.csv.gz",
    "bert_amp_nsys": STEPS / "bert_encoder_train_amp.nsys.sqlite.gz",
    "bert_amp_torch": STEPS / "bert_encoder_train_amp.torch.json.gz",
    "r18_amp_ncu": STEPS / "resnet18_train_amp.ncu.raw.csv.gz",
    "r18_amp_nsys": STEPS / "resnet18_train_amp.nsys.sqlite.gz",
    "r18_amp_torch": STEPS / "resnet18_train_amp.torch.json.gz",
    "r18_amp_nsys_old": NSYS_DATA / "nsys_resnet18_train_amp.sqlite.gz",
    "r18_amp_nsys_run": NSYS_DATA / "nsys_run_resnet18_train_amp.sqlite.gz",
    "r18_amp_torch_run": DATA / "torch" / "torch_run_resnet18_train_amp.json.gz",
    "r50_ddp_amp_nsys": DATA / "ddp" / "nsys_resnet50_ddp_train_amp.sqlite.gz",
}
OTHER_CAPTURES = {
    "zoo32": DATA / "attention" / "attention_zoo_fp32.ncu.raw.csv.gz",
    "pzoo": NCU_DATA / "precision_zoo.raw.csv.gz",
    "r18_fp32": NCU_DATA / "resnet18_fp32_eager.raw.csv.gz",
    "r18_fp16_ncu": NCU_DATA / "resnet18_fp16_eager.raw.csv.gz",
    "r18_fp16_nsys": NSYS_DATA / "nsys_resnet18_fp16.sqlite.gz",
    "r18_fp16_torch": DATA / "torch" / "kineto_resnet18_fp16.json.gz",
    "bert_fp16_torch": DATA / "attention" / "bert_encoder_fp16.torch.json.gz",
}


def _plain(path: Path, tmp: Path) -> Path:
    """nsys exports are read as plain SQLite files."""
    if path.name.endswith(".sqlite.gz"):
        out = tmp / path.name[:-3]
        out.write_bytes(gzip.decompress(path.read_bytes()))
        return out
    return path


def _retagged(src: Path, tmp: Path, old: str, new: str) -> Path:
    """A real ncu CSV with its iteration ranges' tag edited (``.fp32.`` -> ``.amp.``): the
    same kernels, imported as a run of another precision."""
    out = tmp / src.name.removesuffix(".gz").replace(".raw", f".{new.strip('.')}.raw")
    out.write_text(gzip.decompress(src.read_bytes()).decode().replace(old, new))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("f23")
    db = profkit.open_db(tmp / "f.db")
    files = {k: _plain(p, tmp) for k, p in {**AMP_CAPTURES, **OTHER_CAPTURES}.items()}
    # the fp32 attention zoo's GEMMs (fp32 on CUDA cores) as if the run had been an AMP one
    files["zoo32_as_amp"] = _retagged(
        OTHER_CAPTURES["zoo32"], tmp, "attention_zoo.fp32.eager", "attention_zoo.amp.eager"
    )
    out = {k: db.import_file(f, name=k) for k, f in files.items()}
    return db, out, files


def ids(run) -> dict[str, object]:
    return {f.id: f for f in run.findings()}


# ------------------------------------------------------------------ TF32 left off
def test_tf32_left_off_fires_on_fp32_gemms_on_cuda_cores(runs):
    _, r, _ = runs
    zoo = ids(r["zoo32"])["tf32_left_off"]
    # the attention zoo's fp32 matmuls ran cuBLAS's FFMA kernels (its memory-efficient attention ran TF32)
    assert {k.name.split("_tilesize")[0] for k in zoo.kernels} == {
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n",
        "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n",
    }
    assert all(k.precision == "fp32" for k in zoo.kernels) and zoo.share_pct == pytest.approx(
        24.59, abs=0.01
    )
    assert "took 28.4 us (24.6% of GPU time) on CUDA cores" in zoo.detail
    assert "NVIDIA H100 80GB HBM3 (compute capability 9.0) has TF32 tensor cores" in zoo.detail
    assert 'torch.set_float32_matmul_precision("high")' in zoo.advice and "allow_tf32" in zoo.advice
    # the precision zoo's fp32 GEMM (and its split-K pass); its TF32 GEMM and convolution are not counted
    pz = ids(r["pzoo"])["tf32_left_off"]
    assert sorted(k.launches for k in pz.kernels) == [1, 1] and all(
        "ffma" in k.name for k in pz.kernels
    )


def test_tf32_left_off_quiet_where_fp32_work_ran_tf32_or_the_gpu_has_none(runs):
    db, r, _ = runs
    # ResNet-18 fp32: its convolutions ran TF32 (cuDNN's default); the one FFMA convolution (3 input
    # channels) is cuDNN's choice beside them, and the classifier's batch-2 GEMV is 0.8% of the time
    assert "tf32_left_off" not in ids(r["r18_fp32"])
    # half-precision and AMP runs: their own findings
    for name in (
        "r18_fp16_ncu",
        "bert_amp_nsys",
        "zoo32_as_amp",
    ):
        assert "tf32_left_off" not in ids(r[name]), name
    # the same capture on a GPU without TF32 (Volta, Turing) says nothing
    store = db.store
    for cc in ("7.0", "7.5", None):
        got = {f.id for f in findings(store, replace(r["zoo32"], compute_capability=cc))}
        assert "tf32_left_off" not in got, cc
    assert "tf32_left_off" in {
        f.id for f in findings(store, replace(r["zoo32"], compute_capability="8.0"))
    }


# ------------------------------------------------------------------ AMP-aware fp32
@pytest.mark.parametrize("name", list(AMP_CAPTURES))
def test_amp_runs_no_longer_blame_autocasts_fp32_kernels(runs, name):
    """Every committed AMP capture: the optimizer's and autocast's fp32 kernels are meant to be
    (fp32_in_half_run fired on each, 56% of the BERT step), and none has fp32 matrix work."""
    _, r, _ = runs
    run = r[name]
    assert run.precision == "amp"
    found = ids(run)
    assert "fp32_in_half_run" not in found and "fp32_matrix_outside_autocast" not in found
    # the fp32 kernels are still there: elementwise, reductions, the optimizer, none a GEMM/convolution
    groups = [g for g in run.database.store.kernel_groups(run.id) if g.kind == "kernel"]
    fp32 = [g for g in groups if g.precision == "fp32"]
    assert fp32 and not [g for g in fp32 if g.family in ("gemm", "conv", "attention")]


def test_amp_finding_fires_on_fp32_matrix_work(runs):
    _, r, _ = runs
    f = ids(r["zoo32_as_amp"])["fp32_matrix_outside_autocast"]
    # the two FFMA GEMMs and the TF32 memory-efficient attention: all fp32 data, none autocast's
    assert sorted(k.precision for k in f.kernels) == ["fp32", "fp32", "tf32"]
    assert f.share_pct == pytest.approx(24.59 + 25.6, abs=0.1)
    assert "in fp32 or TF32" in f.detail and "in an AMP run" in f.detail
    assert "torch.autocast" in f.advice and "cast it" not in f.advice
    assert "fp32_in_half_run" not in ids(r["zoo32_as_amp"])


def test_half_runs_keep_fp32_in_half_run(runs):
    _, r, _ = runs
    for name in ("r18_fp16_ncu", "r18_fp16_nsys", "r18_fp16_torch"):
        found = ids(r[name])
        assert "fp32_in_half_run" in found and "fp32_matrix_outside_autocast" not in found, name


def test_where_comes_from_the_launching_operators(runs):
    """A torch.profiler run records each kernel's operator: a finding lists them (``where``)."""
    _, r, _ = runs
    f = ids(r["r18_fp16_torch"])["fp32_in_half_run"]
    assert f.where and sum(w.time_ns for w in f.where) == f.time_ns
    assert sum(w.count for w in f.where) == sum(k.launches for k in f.kernels)
    assert [w.time_ns for w in f.where] == sorted((w.time_ns for w in f.where), reverse=True)
    assert all(w.where and w.where.startswith("aten::") for w in f.where)
    assert ids(r["r18_fp16_ncu"])["fp32_in_half_run"].where == []  # ncu records no operators


# ------------------------------------------------------------------ host syncs
def _export_syncs(path: Path) -> list[tuple[str, int]]:
    """The oracle: the export's own sync calls made inside profkit's iteration ranges (name, start)."""
    con = sqlite3.connect(path)
    rows = con.execute("""
        with it as (select n.start, n.end from NVTX_EVENTS n left join StringIds s on s.id = n.textId
                    where coalesce(n.text, s.value) glob '*.iter[0-9]*')
        select s.value, r.start from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s on s.id = r.nameId
        where exists (select 1 from it where it.start <= r.start and r.start < it.end) order by r.start""").fetchall()
    con.close()
    return [(host_sync_call(n), t) for n, t in rows if host_sync_call(n)]


@pytest.mark.parametrize(
    "name, iterations",
    [("r18_amp_nsys_run", 1), ("r18_amp_nsys", 2), ("bert_amp_nsys", 2), ("r18_amp_nsys_old", 2)],
)
def test_host_syncs_fire_on_an_amp_step_under_nsys(runs, name, iterations):
    """GradScaler's found_inf .item(): one cudaStreamSynchronize per step; the harness's own
    cudaDeviceSynchronize ending each step is not counted."""
    _, r, files = runs
    run = r[name]
    f = ids(run)["host_syncs"]
    inside = _export_syncs(files[name])
    assert [n for n, _ in inside] == ["cudaStreamSynchronize", "cudaDeviceSynchronize"] * iterations
    assert f.detail.startswith(
        f"{iterations} host synchronisation{'s' if iterations > 1 else ''}, 1 per iteration "
        f"({iterations} cudaStreamSynchronize)"
    )
    assert 0 < f.time_ns and f.share_pct is None and f.kernels == []
    assert "non_blocking" in f.advice and ".item()" in f.advice


@pytest.mark.parametrize("name", ["r18_amp_torch_run", "r18_amp_torch", "bert_amp_torch"])
def test_host_syncs_name_the_operator_under_torch_profiler(runs, name):
    _, r, _ = runs
    f = ids(r[name])["host_syncs"]
    n = 1 if name == "r18_amp_torch_run" else 2
    assert [(w.where, w.count) for w in f.where] == [("aten::_local_scalar_dense", n)]
    assert f"from aten::_local_scalar_dense ({n})" in f.detail
    assert f.time_ns == sum(w.time_ns for w in f.where) > 0


def test_host_sync_idle_time_agrees_between_tools(runs):
    """The same BERT AMP step under nsys and torch.profiler: the GPU idles about as long after its
    syncs (over a millisecond a step: the optimizer's launches follow the .item())."""
    _, r, _ = runs
    nsys, torch = (
        ids(r["bert_amp_nsys"])["host_syncs"].time_ns,
        ids(r["bert_amp_torch"])["host_syncs"].time_ns,
    )
    assert 2_000_000 < nsys < 3_000_000 and abs(nsys - torch) < 0.1 * nsys


@pytest.mark.parametrize("name", ["r18_fp16_nsys", "r18_fp16_torch", "bert_fp16_torch"])
def test_host_syncs_quiet_on_inference(runs, name):
    """Inference captures sync only outside the measured iterations (the input's copy, the
    warm-up) and at each iteration's end (the harness): nothing inside the step."""
    db, r, files = runs
    run = r[name]
    stored = db.store.host_syncs(run.id)
    assert stored  # the calls are there ...
    assert "host_syncs" not in ids(run)  # ... but none inside a step
    if name == "r18_fp16_nsys":
        assert (
            len(stored) == 127
            and [n for n, _ in _export_syncs(files[name])] == ["cudaDeviceSynchronize"] * 3
        )


def test_ncu_runs_have_no_host_syncs(runs):
    db, r, _ = runs
    assert db.store.host_syncs(r["r18_fp32"].id) == [] and "host_syncs" not in ids(r["r18_fp32"])


def test_ddp_step_syncs_counted_per_process(runs):
    """Two ranks' processes in one nsys report: each sync is its own process's iteration's, and
    a run of event synchronisations waiting for one gap counts that gap once."""
    db, r, _ = runs
    f = ids(r["r50_ddp_amp_nsys"])["host_syncs"]
    assert f.detail.startswith(
        "18 host synchronisations, 9 per iteration (16 cudaEventSynchronize, "
        "2 cudaStreamSynchronize)"
    )
    assert f.time_ns < 5_000_000


# ------------------------------------------------------------------ the store and the outputs
def test_a_failed_import_leaves_no_host_syncs(runs, tmp_path):
    """An export that fails while its kernels are written (one ends before it starts) leaves
    nothing of the run, its host syncs included; the database is unchanged. A run deleted
    takes its host syncs with it."""
    _, _, files = runs
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(files["r18_amp_nsys_run"].read_bytes())
    con = sqlite3.connect(bad)
    con.execute(
        "update CUPTI_ACTIVITY_KIND_KERNEL set end = start - 1 where rowid = "
        "(select max(rowid) from CUPTI_ACTIVITY_KIND_KERNEL)"
    )
    con.commit()
    con.close()
    db = tmp_path / "p.db"
    assert cli("import", str(files["r18_amp_nsys_run"]), "--name", "good", db=db).exit_code == 0
    before = cli_json("runs", db=db)
    result = cli("import", str(bad), db=db)
    assert result.exit_code != 0 and "ends before it starts" in result.output
    assert cli_json("runs", db=db) == before
    con = sqlite3.connect(db)
    assert con.execute("select count(distinct run_id), count(*) from host_syncs").fetchone() == (
        1,
        2,
    )
    con.close()
    store = profkit.open_db(db).store
    store.delete_run(store.get_run("good").id)  # (what an interrupted import's recovery calls)
    con = sqlite3.connect(db)
    assert con.execute("select count(*) from host_syncs").fetchone() == (0,)
    con.close()


def test_summary_and_report_show_the_new_findings(runs, tmp_path):
    db, r, _ = runs
    out = cli("summary", "r18_amp_torch_run", db=db.path)
    assert (
        out.exit_code == 0
        and "host synchronisations inside the step: 1 host synchronisation" in out.output
    )
    assert "fp32 kernels in a half-precision run" not in out.output
    out = cli("summary", "zoo32", db=db.path)
    assert "fp32 matrix work on CUDA cores: TF32 left off" in out.output
    html = r["r18_amp_torch_run"].report(tmp_path / "amp.html").read_text()
    assert (
        'data-id="host_syncs"' in html
        and "aten::_local_scalar_dense" in html
        and "GPU idle after" in html
    )


@pytest.mark.skipif(chromium.available() is not None, reason=str(chromium.available()))
def test_the_findings_render_in_chromium(runs, tmp_path):
    """The AMP step's report (host syncs, where) and the fp32 zoo's (TF32 left off) in a real browser."""
    _, r, _ = runs
    shots = Path(os.environ.get("PROFKIT_SHOTS", tmp_path))
    with chromium.browser() as b:
        for name, fid in (
            ("r18_amp_torch_run", "host_syncs"),
            ("zoo32", "tf32_left_off"),
            ("zoo32_as_amp", "fp32_matrix_outside_autocast"),
        ):
            path = r[name].report(tmp_path / f"{name}.html")
            opened = chromium.open_report(b, path)
            assert opened.errors == [] and opened.dialogs == [] and opened.requests == []
            page = opened.page
            item = page.locator(f'li.finding[data-id="{fid}"]')
            assert item.count() == 1 and item.is_visible()
            where = item.locator("details.where")
            if fid == "host_syncs":
                where.locator("summary").click()
                assert "aten::_local_scalar_dense" in where.inner_text()
            item.scroll_into_view_if_needed()
            shots.mkdir(parents=True, exist_ok=True)
            item.screenshot(path=str(shots / f"{name}-{fid}.png"))
            page.close()


def test_each_ranks_syncs_are_its_own(tmp_path):
    """A DDP step's two ranks: under torch.profiler one trace each, merged into one run (each
    sync gets its rank); under nsys one report, the ranks by pid. Each rank's syncs are counted
    in its own iteration: the same count and calls under both tools."""
    import json

    from profkit.ingest import store_capture
    from profkit.parse.kineto import read_kineto
    from profkit.parse.nsys_sqlite import read_nsys_sqlite
    from profkit.parse.ranks import merge_ranks
    from profkit.store import Store

    ddp = DATA / "ddp"
    store = Store(tmp_path / "d.db")
    found = {}
    for tool in ("torch", "nsys"):
        prefix = f"{tool}_resnet50_ddp_train_amp"
        if tool == "torch":
            capture = merge_ranks(
                {r: read_kineto(ddp / f"{prefix}.rank{r}.json.gz") for r in (0, 1)}
            )
        else:
            infos = [
                json.loads((ddp / f"{prefix}.harness.rank{r}.json").read_text()) for r in (0, 1)
            ]
            capture = read_nsys_sqlite(
                _plain(ddp / f"{prefix}.sqlite.gz", tmp_path),
                ranks={i["pid"]: i["rank"] for i in infos},
            )
        fields = {
            "name": tool,
            "source": "run",
            "workload": "resnet50_ddp_train",
            "precision": "amp",
            "mode": "eager",
            "device": "cuda",
            "info": {"world_size": 2},
        }
        # type: ignore[arg-type]
        run = store_capture(
            store, capture, fields, store.reserve(None, tool, fields, status="running")
        )
        syncs = store.host_syncs(run.id)
        assert {s["rank"] for s in syncs} == {0, 1} and [s["sync_id"] for s in syncs] == list(
            range(len(syncs))
        )
        found[tool] = {f.id: f for f in findings(store, run)}["host_syncs"]
    for f in found.values():
        assert f.detail.startswith(
            "18 host synchronisations, 9 per iteration (16 cudaEventSynchronize, "
            "2 cudaStreamSynchronize)"
        ), f.detail


def test_a_sweep_copies_a_runs_host_syncs(runs, tmp_path):
    """profkit sweep copies each job's run into the sweep's database: its host syncs go with it."""
    from profkit.cluster import _copy_run
    from profkit.store import Store

    db, r, _ = runs
    dest = Store(tmp_path / "sweep.db")
    copied, _ = _copy_run(dest, db.store, r["r18_amp_torch_run"])
    assert dest.host_syncs(copied.id) == db.store.host_syncs(r["r18_amp_torch_run"].id) != []
    assert "host_syncs" in {f.id for f in findings(dest, copied)}
