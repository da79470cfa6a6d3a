"""profkit tune on the CPU (issue 38): the fixes a CPU takes (channels-last, bf16 autocast,
torch.compile) tried for real on a built-in and on a user's training script applied from
outside it, each timed, its outputs compared, ranked and stored; bad input (nothing to tune, a
missing or imported run, a program that cannot be re-run, a failing trial, a finding no fix
answers) one line, or a trial marked as such, with the stored run left as it was. Unit tests of
which fixes a run calls for, the verdicts and the ranking."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from .conftest import DATA, cli, needs_torch, one_line_error

CPU = ("--device", "cpu", "--iters", "3", "--warmup", "1")
VERDICTS = {"gain", "no gain", "outputs disagree", "failed", "not tried", "estimate"}

# A user's training script, nothing profkit-specific in it: a small CNN on random 3x32x32
# images, AdamW, 40 steps.
TRAIN = """\
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
    nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
for step in range(40):
    images = torch.randn(8, 3, 32, 32)
    labels = torch.randint(0, 10, (8,))
    optimizer.zero_grad()
    loss = loss_fn(model(images), labels)
    loss.backward()
    optimizer.step()
print("done", float(loss))
"""

# A workload of a small CNN; FAILS_CHANNELS_LAST: its build refuses channels-last.
CONV = '''\
"""A small CNN{what}."""

CHANNELS_LAST = True
MODES = ("eager", "torchscript")


def build(spec):
    import torch
    from torch import nn
{refuse}
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )
    return model, (torch.randn(spec.batch_size, 3, 32, 32),)
'''
REFUSE = """
    if spec.channels_last:
        raise RuntimeError("this model has no channels-last kernels")
"""


def conv_workload(folder: Path, name: str, refuse: bool = False) -> Path:
    path = folder / f"{name}.py"
    what = ", whose build refuses channels-last" if refuse else ""
    path.write_text(CONV.format(what=what, refuse=REFUSE if refuse else ""), encoding="utf-8")
    return path


def trials_rows(db: Path) -> list[dict]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute("select * from tune_trials order by tuning, seq")]
    finally:
        con.close()


def state(db: Path) -> tuple:
    """What a failed tune must leave as it was: every run (id, name, status, kernel count,
    kernel rows) and the tune_trials rows."""
    con = sqlite3.connect(db)
    try:
        runs = con.execute("select id, name, status, kernel_count from runs order by id").fetchall()
        kernels = con.execute("select count(*) from kernels").fetchone()[0]
    finally:
        con.close()
    return runs, kernels, len(trials_rows(db))


def compiler() -> bool:
    from profkit import benchmark

    return benchmark.compiler("cpu") is not None


# ------------------------------------------------------------------------------ which fixes
def signals(**changed):
    from profkit.tuning import Signals

    base = dict(
        device="cpu",
        program=False,
        half=False,
        eager=True,
        options={},
        matrix_fp32_pct=60.0,
        conv_pct=40.0,
        optimizer=False,
        fused_optimizer=False,
        attention_half_pct=0.0,
        cudnn_attention=False,
        findings={},
    )
    return Signals(**{**base, **changed})


def called(s, monkeypatch, has_compiler: bool = True) -> list[str]:
    from profkit import benchmark, tuning

    monkeypatch.setattr(benchmark, "compiler", lambda device: "cc" if has_compiler else None)
    return [c.fix.id for c in tuning.candidates(s)]


def test_a_cpu_run_calls_for_the_fixes_a_cpu_takes(monkeypatch):
    assert called(signals(), monkeypatch) == ["amp", "channels_last", "compile"]
    assert called(signals(), monkeypatch, has_compiler=False) == ["amp", "channels_last"]
    # Already applied, or nothing for them to act on: not called for.
    done = signals(half=True, eager=False, options={"channels_last": True})
    assert called(done, monkeypatch) == []
    assert called(signals(matrix_fp32_pct=0.0, conv_pct=0.0), monkeypatch) == ["compile"]
    # GPU-only fixes stay off a CPU, whatever calls for them.
    cpu = signals(optimizer=True, findings={"tf32_left_off": None, "launch_bound": None})
    assert not {"tf32", "cudnn_benchmark", "fused_optimizer", "compile_reduce_overhead"} & set(
        called(cpu, monkeypatch)
    )


def test_a_gpu_run_calls_for_its_fixes_by_findings_and_settings(monkeypatch):
    from profkit import tuning

    gpu = signals(device="cuda", optimizer=True, findings={"tf32_left_off": None})
    assert called(gpu, monkeypatch) == [
        "tf32",
        "amp",
        "channels_last",
        "cudnn_benchmark",
        "compile",
        "fused_optimizer",
    ]
    by_id = {c.fix.id: c for c in tuning.candidates(gpu)}
    assert by_id["tf32"].findings == ["tf32_left_off"] and by_id["channels_last"].findings == []
    # The run's own switches, a fused optimizer already, half precision: not called for again.
    done = signals(
        device="cuda",
        optimizer=True,
        fused_optimizer=True,
        half=True,
        options={"tf32": True, "cudnn_benchmark": True},
        findings={"tf32_left_off": None},
    )
    assert called(done, monkeypatch) == ["channels_last", "compile"]
    launch_bound = signals(
        device="cuda", matrix_fp32_pct=0, conv_pct=0, findings={"launch_bound": None}
    )
    assert called(launch_bound, monkeypatch) == ["compile", "compile_reduce_overhead"]


def test_half_fused_attention_calls_for_cudnn_attention_on_a_gpu(monkeypatch):
    half = dict(half=True, eager=False, matrix_fp32_pct=0.0, conv_pct=0.0)
    gpu = signals(device="cuda", attention_half_pct=30.0, **half)
    assert called(gpu, monkeypatch) == ["cudnn_attention"]
    # Too little of it, cuDNN's kernels already, the switch on already, or a CPU: not called.
    assert called(signals(device="cuda", attention_half_pct=4.0, **half), monkeypatch) == []
    ran = signals(device="cuda", attention_half_pct=30.0, cudnn_attention=True, **half)
    assert called(ran, monkeypatch) == []
    on = signals(device="cuda", attention_half_pct=30.0, options={"cudnn_attention": True}, **half)
    assert called(on, monkeypatch) == []
    assert called(signals(attention_half_pct=30.0, **half), monkeypatch) == []


@pytest.mark.parametrize(
    "capture",
    [
        # Flash, memory-efficient and cuDNN attention side by side (each SDPA backend forced).
        "attention/attention_zoo_fp16.torch.json.gz",
        # A BERT-base encoder's and HF BERT's AMP steps on an H100: SDPA's own choice, which on
        # Hopper is cuDNN's already (so the fix is not called for there).
        "attention/bert_encoder_fp16.torch.json.gz",
        "findings/bert-amp-torch/trace.json.gz",
    ],
)
def test_signals_read_fused_attention_and_whose_it_is_from_real_captures(tmp_path, capture):
    import profkit
    from profkit.tuning import candidates
    from profkit.tuning import signals as read_signals

    db = tmp_path / "p.db"
    r = cli("import", DATA / capture, "--name", "a", db=db)
    assert r.exit_code == 0, r.output
    opened = profkit.open_db(db)
    s = read_signals(opened.store, opened.store.get_run("a"))
    assert s.attention_half_pct > 0 and s.cudnn_attention
    assert "cudnn_attention" not in [c.fix.id for c in candidates(s)]


@needs_torch
def test_the_cudnn_attention_switch_puts_cudnn_first_and_keeps_the_rest():
    import torch
    from torch.nn.attention import SDPBackend

    from profkit.process import fixes

    before = torch._C._get_sdp_priority_order()
    flags = [torch.backends.cuda.math_sdp_enabled(), torch.backends.cuda.cudnn_sdp_enabled()]
    try:
        info: dict = {}
        fixes.apply_switches(torch, type("S", (), {"cudnn_attention": True})(), info)
        import gc

        gc.collect()  # the context manager held, not closed by collection
        order = [SDPBackend(i).name for i in torch._C._get_sdp_priority_order()]
        assert order[:4] == ["CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"]
        assert info["attention_backends"][0] == "cudnn_attention"
        assert torch.backends.cuda.cudnn_sdp_enabled() and torch.backends.cuda.math_sdp_enabled()
    finally:
        while fixes._HELD:
            fixes._HELD.pop().__exit__(None, None, None)
    assert torch._C._get_sdp_priority_order() == before
    assert [
        torch.backends.cuda.math_sdp_enabled(),
        torch.backends.cuda.cudnn_sdp_enabled(),
    ] == flags


def test_a_finding_no_fix_answers_calls_for_nothing(monkeypatch):
    from profkit import tuning

    answered = {f for fix in tuning.fix_rules().values() for f in fix.findings}
    assert "cpu_slow_fallback" not in answered
    s = signals(
        half=True,
        eager=False,
        options={"channels_last": True},
        findings={"cpu_slow_fallback": None},
    )
    assert called(s, monkeypatch) == []


def test_every_fix_names_conditions_tuning_checks():
    from profkit import tuning

    fixes = tuning.fix_rules()
    assert {"tf32", "amp", "channels_last", "compile", "fused_optimizer"} <= set(fixes)
    for fix in fixes.values():
        assert set(fix.when) | set(fix.requires) <= set(tuning.CONDITIONS), fix.id
        assert fix.how in ("switch", "option", "code") and fix.code, fix.id
        assert (fix.how == "code") == (fix.estimate_share is not None), fix.id


# ------------------------------------------------------------------------------ verdicts, rank
def trial(verdict="no gain", **figures):
    from profkit.records import TuneTrial

    return TuneTrial(["x"], "x", verdict, **figures)


def verdict(t, base, drift=0.0):
    from profkit.tuning import judge

    return judge(t, base, drift, 1.0).verdict


def test_a_gain_is_beyond_both_spreads_with_outputs_that_agree():

    base = trial("baseline", median_ms=10.0, spread_ms=0.2)
    gain = trial(median_ms=8.0, spread_ms=0.3, saving_ms=2.0, saving_pct=20.0, agreement="agree")
    assert verdict(gain, base) == "gain"
    # Within the two spreads together (0.2 + 0.3): no gain, however many per cent.
    noisy = trial(median_ms=9.6, spread_ms=0.3, saving_ms=0.4, saving_pct=4.0, agreement="agree")
    assert verdict(noisy, base) == "no gain"
    slower = trial(median_ms=12.0, spread_ms=0.1, saving_ms=-2.0, saving_pct=-20.0)
    assert verdict(slower, base) == "no gain"
    # Below min_gain_pct (1%) though beyond a tiny spread.
    tight = trial("baseline", median_ms=10.0, spread_ms=0.0)
    tiny = trial(median_ms=9.95, spread_ms=0.0, saving_ms=0.05, saving_pct=0.5, agreement="agree")
    assert verdict(tiny, tight) == "no gain"
    # Faster but with outputs beyond the tolerance: never ranked as a gain.
    wrong = trial(
        median_ms=5.0, spread_ms=0.1, saving_ms=5.0, saving_pct=50.0, agreement="disagree"
    )
    assert verdict(wrong, base) == "outputs disagree"
    # Nothing to compare: judged on time alone.
    na = trial(median_ms=8.0, spread_ms=0.1, saving_ms=2.0, saving_pct=20.0, agreement="n/a: x")
    assert verdict(na, base) == "gain"
    # The baseline's drift between its first and last timing counts as noise too.
    assert verdict(gain, base, drift=1.6) == "no gain"
    # The saving is the baseline's median less the trial's, whatever the trial said.
    assert judge_saving(trial(median_ms=7.5, spread_ms=0.1), base) == (2.5, 25.0)


def judge_saving(t, base):
    from profkit.tuning import judge

    judged = judge(t, base, 0.0, 1.0)
    return judged.saving_ms, judged.saving_pct


def test_rank_puts_gains_by_saving_then_estimates_then_the_rest():
    from profkit.tuning import rank

    trials = [
        trial("failed", note="boom"),
        trial("no gain", saving_ms=-1.0),
        trial("gain", saving_ms=1.0),
        trial("estimate", estimate_ms=0.5),
        trial("not tried", note="why"),
        trial("outputs disagree", saving_ms=5.0),
        trial("gain", saving_ms=3.0),
        trial("estimate", estimate_ms=2.0),
    ]
    ranked = rank(trials)
    assert [(t.verdict, t.saving_ms or t.estimate_ms) for t in ranked] == [
        ("gain", 3.0),
        ("gain", 1.0),
        ("estimate", 2.0),
        ("estimate", 0.5),
        ("no gain", -1.0),
        ("outputs disagree", 5.0),
        ("failed", None),
        ("not tried", None),
    ]


@needs_torch
def test_outputs_agree_within_the_tolerance_of_their_precision(tmp_path):
    import torch

    from profkit.tuning import _agree

    base = torch.linspace(-2.0, 2.0, 40).reshape(4, 10)
    paths = {}
    for name, value in {
        "base": base,
        "close": base + 1e-4,
        "far": base + 0.5,
        "shape": base[:2],
        "nan": torch.where(base > 1.5, torch.nan, base),
        "inf_base": torch.where(base > 1.5, torch.inf, base),
    }.items():
        paths[name] = tmp_path / f"{name}.pt"
        torch.save(value, paths[name])
    fp32 = trial(tolerance=1e-3)
    close = _agree(fp32, paths["close"], paths["base"], None)
    assert close.agreement == "agree" and close.rel_diff == pytest.approx(5e-5, rel=0.05)
    assert close.top1_agreement == 1.0 and close.max_abs_diff == pytest.approx(1e-4, rel=0.05)
    assert _agree(fp32, paths["far"], paths["base"], None).agreement == "disagree"
    assert _agree(trial(tolerance=0.5), paths["far"], paths["base"], None).agreement == "agree"
    # A fix that changes the output's shape, or makes it NaN/inf where the baseline's is finite,
    # changed what the model computes: it disagrees (never ranked as a gain), saying how.
    shape = _agree(fp32, paths["shape"], paths["base"], None)
    assert shape.agreement == "disagree" and "(2, 10) is not the baseline's (4, 10)" in shape.note
    nan = _agree(trial(tolerance=0.5), paths["nan"], paths["base"], None)
    assert nan.agreement == "disagree" and "NaN or infinity" in nan.note
    # A baseline that is not finite itself leaves nothing to compare with.
    assert _agree(fp32, paths["base"], paths["inf_base"], None).agreement.startswith("n/a: the ")
    unreadable = tmp_path / "broken.pt"
    unreadable.write_bytes(b"not a tensor")
    assert _agree(fp32, unreadable, paths["base"], None).agreement.startswith("n/a: its output")
    assert _agree(fp32, None, paths["base"], None).agreement.startswith("n/a")


# ------------------------------------------------------------------------------ bad input
@pytest.fixture
def imported(db):
    """A database holding an imported capture (a CPU resnet18's Kineto trace)."""
    r = cli("import", DATA / "torch" / "cpu_resnet18_fp32.json.gz", "--name", "imported", db=db)
    assert r.exit_code == 0, r.output
    return db


def test_nothing_to_tune_is_one_line(imported):
    before = state(imported)
    one_line_error(cli("tune", db=imported), "nothing to tune", code=2)
    assert state(imported) == before


def test_a_missing_run_is_one_line(imported):
    before = state(imported)
    r = cli("tune", "--run", "nope", db=imported)
    assert r.exit_code != 0 and "nope" in r.stderr
    one_line_error(r, "nope", code=r.exit_code)
    assert state(imported) == before


def test_run_options_with_a_stored_run_are_one_line(imported):
    before = state(imported)
    r = cli("tune", "--run", "imported", "--precision", "fp16", "--channels-last", db=imported)
    one_line_error(r, "--run starts from a stored run", code=r.exit_code)
    assert r.exit_code != 0 and "--precision" in r.stderr and "--channels-last" in r.stderr
    r = cli("--db", imported, "tune", "--run", "imported", "--", "python", "x.py")
    one_line_error(r, "give no program", code=r.exit_code)
    assert r.exit_code != 0
    assert state(imported) == before


@needs_torch
def test_an_imported_capture_cannot_be_tuned(imported):
    before = state(imported)
    r = cli("tune", "--run", "imported", *CPU[2:], db=imported)
    one_line_error(r, "was imported, not run by profkit", code=r.exit_code)
    assert r.exit_code != 0
    assert state(imported) == before


RUNS_ONCE = """\
import os, sys
import torch

if os.path.exists("started"):
    sys.exit("this script ran already: remove ./started to run it again")
open("started", "w").close()
model = torch.nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(20):
    optimizer.zero_grad()
    model(torch.randn(8, 16)).sum().backward()
    optimizer.step()
"""


@needs_torch
def test_a_program_that_cannot_be_rerun_leaves_its_run_intact(tmp_path, monkeypatch, db):
    import profkit

    monkeypatch.chdir(tmp_path)
    (tmp_path / "once.py").write_text(RUNS_ONCE, encoding="utf-8")
    run = profkit.profile(
        program=["python", "once.py"], device="cpu", iters=2, warmup=1, db=db, name="once"
    )
    assert run.kernel_count and (tmp_path / "started").exists()
    before = state(db)
    r = cli("tune", "--run", "once", *CPU[2:], db=db)
    one_line_error(r, "the baseline of python once.py failed", code=r.exit_code)
    assert r.exit_code != 0 and "exit status 1" in r.stderr
    assert state(db) == before and trials_rows(db) == []
    # Its script gone: refused before anything runs.
    (tmp_path / "once.py").unlink()
    r = cli("tune", "--run", "once", *CPU[2:], db=db)
    one_line_error(r, "once.py", code=r.exit_code)
    assert r.exit_code != 0
    assert state(db) == before
    assert profkit.open_db(db).run("once").tunings() == []


@needs_torch
def test_a_run_of_a_workload_file_needs_its_file(tmp_path, db):
    """A run of a workload file names the workload only: tune --run asks for the file, and with
    it, tries the fixes (a run whose settings call for none: the baseline alone)."""
    import profkit

    path = conv_workload(tmp_path, "small_cnn")
    profkit.profile(
        str(path),
        device="cpu",
        precision="fp32",
        mode="torchscript",
        channels_last=True,
        batch_size=2,
        iters=2,
        warmup=1,
        db=db,
        name="cnn",
    )
    before = state(db)
    r = cli("tune", "--run", "cnn", *CPU[2:], db=db)
    one_line_error(r, "which is no built-in: give its file", code=r.exit_code)
    assert state(db) == before
    r = cli("tune", "resnet18", "--run", "cnn", *CPU[2:], db=db)
    one_line_error(r, "is of workload small_cnn, not resnet18", code=r.exit_code)
    assert state(db) == before


@needs_torch
def test_a_finding_no_fix_answers_gives_a_tuning_not_an_error(tmp_path, db):
    """fp16 convolutions on a CPU without fp16 kernels take PyTorch's slow fallback
    (cpu_slow_fallback), which no [[fix]] answers; channels-last on, TorchScript and fp16 leave
    nothing else to try: the tuning holds the baseline alone."""
    import profkit
    from profkit import tuning

    path = conv_workload(tmp_path, "small_cnn")
    done = profkit.tune(
        str(path),
        device="cpu",
        precision="fp16",
        mode="torchscript",
        channels_last=True,
        batch_size=2,
        iters=3,
        warmup=1,
        db=db,
    )
    run = profkit.open_db(db).run(done.run)
    found = {f.id for f in run.findings()}
    if "cpu_slow_fallback" not in found:
        pytest.skip("this CPU has fast fp16 convolutions: no finding without a fix to test")
    answered = {f for fix in tuning.fix_rules().values() for f in fix.findings}
    assert found and not found & answered
    assert done.trials == [] and done.best is None
    assert done.baseline.verdict == "baseline" and done.baseline.median_ms > 0
    assert [t.to_dict() for t in run.tunings()] == [done.to_dict()]
    assert len(trials_rows(db)) == 1


@pytest.mark.slow  # a program or workload tuned end to end (~15-25 s)
@needs_torch
def test_a_failing_trial_is_shown_failed_while_the_others_go_on(tmp_path, db):
    path = conv_workload(tmp_path, "no_channels_last", refuse=True)
    r = cli(
        "tune",
        path,
        "--mode",
        "torchscript",
        "--batch-size",
        "2",
        *CPU,
        db=db,
    )
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    import profkit

    run = profkit.open_db(db).run("no_channels_last-fp32-torchscript-cpu")
    (tuned,) = run.tunings()
    by_fix = {tuple(t.fixes): t for t in tuned.trials}
    failed = by_fix[("channels_last",)]
    assert failed.verdict == "failed" and failed.median_ms is None
    assert "this model has no channels-last kernels" in failed.note
    assert "\n" not in failed.note
    amp = by_fix[("amp",)]
    assert amp.measured and amp.verdict in VERDICTS - {"failed", "not tried"}
    assert amp.agreement in ("agree", "disagree")
    assert tuned.trials.index(failed) > tuned.trials.index(amp)  # ranked after what was measured
    lines = r.stdout.splitlines()
    assert any("channels-last" in line and "failed" in line for line in lines), r.stdout
    assert "this model has no channels-last kernels" in " ".join(r.stdout.split())


@pytest.mark.slow  # a workload tuned end to end in two rounds (~30 s)
@needs_torch
def test_rounds_time_each_setting_in_as_many_processes(tmp_path, db):
    """--rounds 2: the baseline timed in round 1, round 2 and last, each measured fix in two
    processes, their steps pooled (what changes between processes is in the spread) and each
    process's median noted; a fix that fails stays failed in one line."""
    path = conv_workload(tmp_path, "no_channels_last", refuse=True)
    r = cli(
        "tune", path, "--mode", "torchscript", "--batch-size", "2", *CPU, "--rounds", "2", db=db
    )
    assert r.exit_code == 0, r.output
    import profkit

    (tuned,) = profkit.open_db(db).run("no_channels_last-fp32-torchscript-cpu").tunings()
    assert len(tuned.baseline.iter_ns) == 3 * 3 and "timed 3 times: " in tuned.baseline.note
    measured = [t for t in tuned.trials if t.measured]
    assert measured
    for t in measured:
        assert len(t.iter_ns) == 2 * 3 and "timed in 2 processes: " in t.note, t
        assert t.verdict in VERDICTS - {"failed", "not tried"} and t.saving_ms is not None
    failed = next(t for t in tuned.trials if t.fixes == ["channels_last"])
    assert failed.verdict == "failed" and "\n" not in failed.note


ONCE_CHANNELS_LAST = """
    if spec.channels_last:
        import os

        if os.path.exists({mark!r}):
            raise RuntimeError("channels-last refused the second time")
        open({mark!r}, "w").close()
"""


@pytest.mark.slow  # a workload tuned end to end in two rounds (~30 s)
@needs_torch
def test_a_fix_that_fails_in_a_later_round_is_failed_with_no_figures(tmp_path, db):
    path = tmp_path / "flaky.py"
    mark = str(tmp_path / "channels-last-once")
    path.write_text(
        CONV.format(what=", channels-last once", refuse=ONCE_CHANNELS_LAST.format(mark=mark)),
        encoding="utf-8",
    )
    r = cli(
        "tune", path, "--mode", "torchscript", "--batch-size", "2", *CPU, "--rounds", "2", db=db
    )
    assert r.exit_code == 0, r.output
    import profkit

    (tuned,) = profkit.open_db(db).run("flaky-fp32-torchscript-cpu").tunings()
    flaky = next(t for t in tuned.trials if t.fixes == ["channels_last"])
    assert flaky.verdict == "failed" and flaky.note.startswith("round 2: "), flaky
    assert "refused the second time" in flaky.note and not flaky.measured
    assert flaky.saving_ms is None and flaky.iter_ns == []
    assert tuned.best is None or tuned.best.fixes != ["channels_last"]


@needs_torch
def test_rounds_with_fixes_tried_together_time_everything_in_folders_of_its_own(
    tmp_path, db, monkeypatch
):
    """Two fixes that each gain (timings made up, each process's folder made as bench makes
    it): with --rounds 2 the fixes tried together get their second round too, each baseline
    timing in a folder of its own, and the last baseline timing failing leaves every figure
    judged against the timings the baseline has."""
    import profkit
    from profkit import tuning
    from profkit.records import BenchRow

    path = conv_workload(tmp_path, "small_cnn")
    run = profkit.profile(
        str(path), device="cpu", batch_size=2, iters=2, warmup=1, db=db, name="cnn"
    )
    store = profkit.open_db(db).store
    plan = tuning.plan(store, run, workload=str(path), iters=3, warmup=1, rounds=2)
    ms = {
        frozenset(): 10.0,
        frozenset({"channels_last"}): 8.0,
        frozenset({"amp"}): 7.0,
        frozenset({"channels_last", "amp"}): 6.0,
    }
    seen: list[str] = []
    saved: list[str] = []

    def measure(p, req, fixes, folder, progress, save_output=True):
        folder.mkdir()  # as benchmark.measure does: a folder used twice fails
        seen.append(folder.name)
        if save_output:
            saved.append(folder.name)
        if folder.name == "baseline-again":
            return BenchRow("fp32", "eager", "failed", error="lost"), {"model": True}, None
        t = int(ms.get(frozenset(f.id for f in fixes), 9.5) * 1e6)  # 9.5: any other fix
        return BenchRow("fp32", "eager", "ok", iter_ns=[t, t, t]), {"model": True}, None

    monkeypatch.setattr(tuning, "_measure", measure)
    monkeypatch.setattr(
        tuning,
        "_together",
        lambda p, todo, trials: [c for c in todo if c.fix.id in ("channels_last", "amp")],
    )
    from profkit.launch import Progress

    said: list[str] = []
    done = tuning.run(store, plan, Progress(on_stage=said.append))
    assert len(seen) == len(set(seen))
    # counted among the trials as planned; the fixes that gained, tried together after, apart
    counted = [s for s in said if "round 1 of 2)" in s]
    places = [tuple(map(int, re.search(r"\((\d+) of (\d+)", s).groups())) for s in counted[:-1]]
    total = places[0][1]  # a fix that cannot be applied here is counted, not announced
    assert len(places) >= 3 and {n for _, n in places} == {total}, said
    assert [i for i, _ in places] == sorted({i for i, _ in places}) and places[0][0] == 1, said
    assert places[-1][0] <= total, said
    assert counted[-1].endswith("(the fixes that gained, together, round 1 of 2)"), said
    both = next(t for t in done.trials if len(t.fixes) == 2)
    assert both.verdict == "gain" and both.median_ms == 6.0 and len(both.iter_ns) == 6
    assert both.saving_ms == pytest.approx(done.baseline.median_ms - 6.0)
    assert "its last timing, after the trials, failed (lost)" in done.baseline.note
    assert len(done.baseline.iter_ns) == 3 * 3  # round 1, round 2, the together's round 2
    # outputs are compared on each setting's first timing only: the later ones keep none
    assert saved and all("-" not in name for name in saved) and "baseline-again" not in saved


@pytest.mark.parametrize("rounds", ["0", "21", "two"])
def test_bad_rounds_are_one_line_before_anything_runs(imported, rounds):
    before = state(imported)
    r = cli("tune", "resnet18", "--device", "cpu", "--rounds", rounds, db=imported)
    one_line_error(r, "rounds", code=r.exit_code)
    assert r.exit_code != 0 and state(imported) == before


def test_bad_rounds_through_the_library_are_refused_before_the_profile(tmp_path):
    import profkit
    from profkit.errors import UsageError

    for rounds in (0, 21, 10**30, 1.5, True):
        with pytest.raises(UsageError, match="rounds") as raised:
            profkit.tune("resnet18", device="cpu", rounds=rounds, db=tmp_path / "p.db")
        if isinstance(rounds, int) and rounds > 1:
            assert "at most 20" in str(raised.value)
    assert not (tmp_path / "p.db").exists() or profkit.open_db(tmp_path / "p.db").runs() == []


# ------------------------------------------------------------------------------ real tunings
@pytest.mark.slow
@needs_torch
def test_a_built_in_is_tuned_on_the_cpu_stored_and_ranked(tmp_path):
    """resnet18 tuned on the CPU through the library (profiled first), then again from its
    stored run through the command. One test, so that one process tunes it (about 90 s)."""
    import profkit

    db = tmp_path / "p.db"
    done = profkit.tune("resnet18", device="cpu", batch_size=1, iters=3, warmup=1, db=db)
    assert done.target == "resnet18" and done.device == "cpu"
    assert (done.iters, done.warmup) == (3, 1)
    assert done.baseline.verdict == "baseline" and done.baseline.median_ms > 0
    # Timed first and again last: both timings' steps, and the two medians in its note.
    assert len(done.baseline.iter_ns) == 6 and "timed first and last" in done.baseline.note
    tried = {tuple(t.fixes): t for t in done.trials}
    expected = [("channels_last",), ("amp",)] + ([("compile",)] if compiler() else [])
    for fixes in expected:
        t = tried[fixes]
        assert t.verdict in VERDICTS - {"not tried", "failed", "estimate"}, t
        assert t.measured and len(t.iter_ns) == 3 and t.spread_ms is not None
        assert t.saving_ms == pytest.approx(done.baseline.median_ms - t.median_ms, abs=1e-5)
        # Outputs compared: resnet18's logits, within its precision's tolerance.
        assert t.agreement == "agree" and t.rel_diff is not None and t.top1_agreement is not None
        assert t.rel_diff <= t.tolerance and t.code
    assert tried[("amp",)].tolerance == 5e-2 and tried[("channels_last",)].tolerance == 1e-3
    assert tried[("amp",)].code[0].startswith('with torch.autocast("cpu", dtype=torch.bfloat16)')
    assert not {f for t in done.trials for f in t.fixes} & {"tf32", "cudnn_benchmark"}
    # Ranked: gains first, by saving; best is the first gain.
    gains = [t for t in done.trials if t.verdict == "gain"]
    assert done.trials[: len(gains)] == gains
    assert [t.saving_ms for t in gains] == sorted((t.saving_ms for t in gains), reverse=True)
    assert done.best == (gains[0] if gains else None)

    # Again from the stored run, through the command: the ranked table.
    again = cli("tune", "--run", done.run, *CPU[2:], db=db)
    assert again.exit_code == 0, again.output
    run = profkit.open_db(db).run(done.run)
    stored = run.tunings()
    assert len(stored) == 2 and stored[0].to_dict() == done.to_dict()
    rows = trials_rows(db)
    assert [r["tuning"] for r in rows] == [1] * (1 + len(done.trials)) + [2] * (
        1 + len(stored[1].trials)
    )
    assert all(r["run_id"] == run.id for r in rows)
    assert [r["seq"] for r in rows if r["tuning"] == 1] == list(range(1 + len(done.trials)))
    out, words = again.stdout, " ".join(again.stdout.split())
    assert f"resnet18 (run {done.run}) on the CPU: 3 timed steps after 1" in words
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("#"))
    assert lines[at].split()[:4] == ["#", "fix", "step", "saves"] and "verdict" in lines[at]
    table = []  # the rows, numbered 1, 2, ... under the header (a wrapped line below is not one)
    for line in lines[at + 1 :]:
        if not re.match(rf"{len(table) + 1}\s", line):
            break
        table.append(line)
    assert len(table) == len(stored[1].trials), out
    for line, t in zip(table, stored[1].trials):
        assert t.verdict in line, (line, t)
    best = stored[1].best
    if best is None:
        assert "no fix profkit tried gains" in words
    else:
        assert f"do this first: {best.title}" in words and best.code[0].strip() in out

    if not compiler():
        pytest.skip("no C++ compiler: torch.compile cannot run on this CPU, so it was not tried")
    (t,) = [t for t in done.trials if t.fixes == ["compile"]]
    assert t.code == ["model = torch.compile(model)"]


@pytest.mark.slow
@needs_torch
def test_a_training_script_is_tuned_from_outside_its_code(tmp_path, monkeypatch, db):
    import profkit

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN, encoding="utf-8")
    r = cli("--db", db, "tune", *CPU, "--", "python", "train.py")  # --db before the program
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    (run,) = [profkit.open_db(db).run(n) for n in profkit.open_db(db).runs()["name"]]
    assert run.info.program is not None
    (tuned,) = run.tunings()
    assert tuned.target == "python train.py" and tuned.device == "cpu"
    tried = {tuple(t.fixes): t for t in tuned.trials}
    expected = [("channels_last",), ("amp",)] + ([("compile",)] if compiler() else [])
    for fixes in expected:
        t = tried[fixes]
        assert t.measured and t.verdict in VERDICTS - {"not tried", "failed", "estimate"}, t
        # Applied to its model from outside (the first module with parameters it calls), and
        # its model's output on its first call compared with the baseline's.
        assert not t.note or "called no module" not in t.note, t.note
        assert t.agreement == "agree", t
        assert t.code
    assert tried[("amp",)].rel_diff > 0 and tried[("channels_last",)].rel_diff < 1e-3
    # On the CPU its AdamW cannot be fused: not tried.
    assert ("fused_optimizer",) not in tried
    # torch.compile compiles at the model's first call, in the warm-up step.
    if compiler():
        assert tuned.warmup == 1 and len(tried[("compile",)].iter_ns) == 3
        assert max(tried[("compile",)].iter_ns) < 100 * tuned.baseline.median_ms * 1e6
    words = " ".join(r.stdout.split())
    assert "python train.py (run" in words and "autocast" in words


# A script with no nn.Module: functional convolutions on raw tensors, an optimizer over them.
NO_MODULE = """\
import torch
import torch.nn.functional as F

torch.manual_seed(0)
weight = torch.randn(16, 3, 3, 3, requires_grad=True)
head = torch.randn(16, 10, requires_grad=True)
optimizer = torch.optim.SGD([weight, head], lr=0.01)
for step in range(40):
    images = torch.randn(8, 3, 32, 32)
    features = F.relu(F.conv2d(images, weight, padding=1)).mean((2, 3))
    loss = (features @ head).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


@pytest.mark.slow  # a program or workload tuned end to end (~15-25 s)
@needs_torch
def test_a_script_with_no_module_gets_its_model_fixes_not_tried(tmp_path, monkeypatch, db):
    """Channels-last, autocast and torch.compile act on a program's model: a script that calls
    no module with parameters has none, so each is "not tried", saying why, never a gain."""
    import profkit

    monkeypatch.chdir(tmp_path)
    (tmp_path / "functional.py").write_text(NO_MODULE, encoding="utf-8")
    done = profkit.tune(program=["python", "functional.py"], device="cpu", iters=3, warmup=1, db=db)
    assert done.trials, "a convolution-heavy fp32 eager run calls for fixes"
    for t in done.trials:
        assert t.verdict == "not tried" and "called no module with parameters" in t.note, t
    assert done.best is None
    assert done.baseline.agreement is None and "no model output" in done.baseline.note


# A GAN's discriminator as pytorch/examples' DCGAN trains it: a sigmoid output into BCELoss, which
# takes no bf16 input; the loss is computed outside the model, where profkit's autocast is not.
BCE = """\
import torch
from torch import nn

net = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.LeakyReLU(0.2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    nn.Linear(8, 1), nn.Sigmoid(),
)
optimizer = torch.optim.Adam(net.parameters(), lr=2e-4)
criterion = nn.BCELoss()
for step in range(30):
    output = net(torch.randn(4, 3, 16, 16)).view(-1)
    loss = criterion(output, torch.full((4,), 1.0))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


@pytest.mark.slow  # a program or workload tuned end to end (~15-25 s)
@needs_torch
def test_autocast_from_outside_gives_the_caller_fp32_outputs(tmp_path, monkeypatch, db):
    """bf16 autocast around a program's model hands its outputs back in fp32, as the code around
    the model had them: a BCELoss after it runs (it raised "Found dtype Float but expected
    BFloat16" on DCGAN's discriminator when the model's bf16 output reached it)."""
    import profkit

    monkeypatch.chdir(tmp_path)
    (tmp_path / "gan.py").write_text(BCE, encoding="utf-8")
    done = profkit.tune(program=["python", "gan.py"], device="cpu", iters=3, warmup=1, db=db)
    (amp,) = [t for t in done.trials if t.fixes == ["amp"]]
    assert amp.measured and amp.verdict != "failed", amp
    assert amp.agreement == "agree" and 0 < amp.rel_diff <= amp.tolerance
    # The trials' files are kept in the run's folder, where a failed one's note points.
    run = profkit.open_db(db).run(done.run)
    assert (
        Path(run.database.store.run_folder(run)) / "tune-1" / "baseline" / "harness.log"
    ).exists()


SDPA_PROBE = """
import json, sys, torch
from profkit.options import Spec
from profkit.process import fixes
info = {}
fixes.apply_switches(torch, Spec(device="cpu", sdpa_attention=True), info)
imported_by_switch = "transformers" in sys.modules
from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, attn_implementation="eager")
bert = BertForMaskedLM(config).eval()
own = bert.config._attn_implementation
ids = torch.randint(0, 64, (2, 16))
switched = bert(ids).logits
bert.set_attn_implementation("eager")
eager = bert(ids).logits
default = BertForMaskedLM(BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64))
print(json.dumps({"made": info["sdpa_models"], "own": own, "early": imported_by_switch,
                  "diff": (switched - eager).abs().max().item(),
                  "default": default.config._attn_implementation}))
"""


@needs_torch
def test_hugging_face_models_made_with_eager_attention_run_sdpa_under_the_switch(tmp_path):
    """--sdpa-attention (a process switch, as --fused-optimizer): a BERT made with its eager
    attention is switched to SDPA through transformers' own set_attn_implementation as it is
    made, its outputs the same; a model on SDPA already is left alone and not listed."""
    pytest.importorskip("transformers")
    import json
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", SDPA_PROBE],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["made"] == ["BertModel"] and got["own"] == "sdpa", got
    assert got["diff"] < 1e-5 and got["default"] == "sdpa"
    # transformers is imported by the script, not by the switch (its settings read then are
    # the script's: HF_HOME, offline mode)
    assert got["early"] is False


def test_a_switch_the_process_cannot_apply_is_one_line(monkeypatch):
    from profkit.errors import WorkloadError
    from profkit.options import Spec
    from profkit.process import fixes

    def broken(torch):
        raise TypeError("sdpa_kernel() got an unexpected keyword argument 'set_priority'")

    monkeypatch.setattr(fixes, "cudnn_attention_first", broken)
    with pytest.raises(WorkloadError) as got:
        fixes.apply_switches(object(), Spec(cudnn_attention=True), {})
    assert got.value.one_line().count("\n") == 0
    assert "--cudnn-attention could not be applied in this process: TypeError" in str(got.value)


def test_the_sdpa_switch_that_switched_nothing_is_not_tried():
    from profkit.tuning import _not_applied, fix_rules

    fix = fix_rules()["sdpa_attention"]
    p = type("P", (), {"program": False})()
    assert _not_applied(p, [fix], {"sdpa_models": ["BertModel"]}) is None
    assert _not_applied(p, [fix], {}) == "no Hugging Face model with eager attention was made"
    why = _not_applied(p, [fix], {"sdpa_models": ["OldModel (not switched: no SDPA)"]})
    assert (
        why
        == "no Hugging Face model with eager attention was made: OldModel (not switched: no SDPA)"
    )


@needs_torch
def test_a_tuning_stopped_midway_says_what_it_measured_and_stores_nothing(
    tmp_path, db, monkeypatch
):
    """Ctrl-C (or SIGTERM) after the baseline and one fix were timed: the stop ends the command
    as any stop does, nothing of the tuning is stored, and the trial already timed is said, so
    that a long tuning cut short is not all lost."""
    from profkit import tuning

    path = conv_workload(tmp_path, "stopped")
    measure, calls = tuning._measure, []

    def stopping(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the baseline, the first fix, then the stop
            raise KeyboardInterrupt
        return measure(*args, **kwargs)

    monkeypatch.setattr(tuning, "_measure", stopping)
    r = cli("tune", path, "--batch-size", "2", *CPU, db=db)
    assert r.exit_code != 0 and "Traceback" not in r.output
    said = " ".join(r.stderr.split())
    assert "tuning stopped: nothing is stored; measured so far (baseline" in said, r.stderr
    assert "autocast (AMP): " in said and " ms" in said
    import profkit

    (run,) = profkit.open_db(db).list_runs()
    assert run.tunings() == []


@pytest.mark.parametrize(("given", "profiled"), [({}, True), ({"attribution": False}, False)])
def test_tunes_profile_records_attribution_under_every_tool(tmp_path, monkeypatch, given, profiled):
    """tune's first profile records attribution whatever the tool (the findings that name
    operators and shapes call for fixes), unless the caller says --no-attribution."""
    import profkit
    from profkit import api

    seen: list[dict] = []

    class Profiled(Exception):
        pass

    def profile(workload, **options):
        seen.append(options)
        raise Profiled

    monkeypatch.setattr(api, "profile", profile)
    with pytest.raises(Profiled):
        profkit.tune("resnet18", tool="nsys", db=tmp_path / "p.db", **given)
    assert seen[0]["attribution"] is profiled and seen[0]["tool"] == "nsys"
