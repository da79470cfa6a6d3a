"""Workloads and the harness on the CPU: built-ins and users' files build and step in every
precision and mode, and the measured iterations are timed and named as the filters expect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profkit import nvtx_ranges, workloads
from profkit.errors import WorkloadError

from .conftest import needs_torch

HERE = Path(__file__).parent


@needs_torch
@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("mode", ["eager", "torchscript"])
def test_resnet18_builds_and_steps_on_cpu(precision, mode):
    import torch

    _, path = workloads.resolve("resnet18")
    spec = workloads.Spec(batch_size=1, precision=precision, mode=mode, device="cpu")
    out = workloads.prepare(workloads.load_module(path), spec)()
    assert out.shape == (1, 1000)
    assert out.dtype == (torch.bfloat16 if precision in ("bf16", "amp") else torch.float32)


@needs_torch
def test_user_file_returning_a_step():
    _, path = workloads.resolve(str(HERE / "workloads" / "no_gpu_work.py"))
    step = workloads.prepare(workloads.load_module(path), workloads.Spec(device="cpu"))
    assert step() is None


@needs_torch
def test_broken_build_is_a_workload_error():
    _, path = workloads.resolve(str(HERE / "workloads" / "broken_build.py"))
    with pytest.raises(WorkloadError, match="weights file missing"):
        workloads.prepare(workloads.load_module(path), workloads.Spec(device="cpu"))


def test_file_without_build(tmp_path):
    f = tmp_path / "nobuild.py"
    f.write_text("x = 1\n")
    with pytest.raises(WorkloadError, match="defines no build"):
        workloads.load_module(workloads.resolve(str(f))[1])
    g = tmp_path / "syntax.py"
    g.write_text("def build(:\n")
    with pytest.raises(WorkloadError, match="failed to import"):
        workloads.load_module(workloads.resolve(str(g))[1])


def test_builtins_listed_without_torch():
    assert {"vgg16", "resnet50", "resnet18", "precision_zoo"} <= set(workloads.builtin_names())
    assert "VGG16" in workloads.describe(workloads.builtin_path("vgg16"))


def test_a_description_is_the_docstrings_whole_first_paragraph():
    """`profkit workloads` shows each description whole, not cut where the source breaks a line."""
    import ast

    for name in workloads.builtin_names():
        path = workloads.builtin_path(name)
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        said = workloads.describe(path)
        assert "\n" not in said and said.split() == doc.strip().split("\n\n")[0].split(), name
    zoo = workloads.describe(workloads.builtin_path("precision_zoo"))
    assert "fp16, bf16, fp8, int8) plus an fp32 and an fp16 convolution" in zoo and zoo.endswith(
        "."
    )


@needs_torch
def test_harness_runs_measured_iterations(tmp_path):
    tag = nvtx_ranges.tag("resnet18", "fp32", "eager")
    job = {
        "spec": workloads.Spec(batch_size=1, device="cpu").as_dict(),
        "workload_path": str(workloads.resolve("resnet18")[1]),
        "warmup": 3,
        "iters": 2,
        "tag": tag,
        "info_path": str(tmp_path / "info.json"),
    }
    (tmp_path / "job.json").write_text(json.dumps(job))
    subprocess.run(
        [sys.executable, "-m", "profkit.harness", str(tmp_path / "job.json")], check=True
    )
    info = json.loads((tmp_path / "info.json").read_text())
    assert len(info["iteration_wall_ns"]) == 2 and all(t > 0 for t in info["iteration_wall_ns"])
    # Issue 36: the warm-up steps after the first, each timed (no profiler, no ranges): the bare step.
    assert len(info["bare_iteration_ns"]) == 2 and all(t > 0 for t in info["bare_iteration_ns"])
    assert info["torch_version"]
    # Where the process's time went: seconds since it began, each stage after the one before
    # (the warm-up's step timer once clobbered the clock they are read from).
    stages = list(info["stages_s"].values())
    assert list(info["stages_s"]) == [
        "torch_imported",
        "built",
        "gpu_turn",
        "warmed_up",
        "measured",
    ]
    assert 0 <= stages[0] and stages == sorted(stages) and stages[-1] < 600


@needs_torch
@pytest.mark.parametrize(
    "counting,timing,worker,gzipped",
    [(True, False, False, False), (True, False, True, False), (False, True, False, False)]
    + [(False, True, True, False), (False, False, False, False)]
    + [(False, True, False, True), (True, False, False, True)],
)
def test_the_per_function_plans_harnesses_end_at_once_where_nothing_is_left_running(
    tmp_path, counting, timing, worker, gzipped
):
    """The counting process of ncu's per-function plan, and its timing process (the run's
    harness, which times every launch with CUPTI: a repeated run's only process), skip Python's
    and CUDA's teardown when the workload left nothing running; the timing one runs the exit
    handlers first (the workload's are its own). Where the workload left a worker process, the
    normal exit ends it, so that no process outlives the harness holding its output open. Either
    fast exit writes out the workload's open files and C's buffered output first; where one is
    a file that closing writes more to (a gzip file's trailer), the harness ends normally. Any
    other harness (under nsys or torch.profiler, or none) ends normally."""
    marker = tmp_path / "exit.txt"
    job = {
        "spec": workloads.Spec(batch_size=2, device="cpu").as_dict(),
        "workload_path": str(HERE / "workloads" / "leaves_workers.py"),
        "warmup": 1,
        "iters": 1,
        "tag": "leaves_workers.fp32.eager",
        "info_path": str(tmp_path / "info.json"),
        "counting": counting,
        # no CUPTI on a CPU: the timer fails in one line (kernel_timer_error), the job is the same
        "kernel_times_path": str(tmp_path / "times.json") if timing else None,
    }
    (tmp_path / "job.json").write_text(json.dumps(job))
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},  # C's stdio buffered
        "PROFKIT_TEST_MARKER": str(marker),
        **({"PROFKIT_TEST_WORKER": "1"} if worker else {}),
        **({"PROFKIT_TEST_GZIP": "1"} if gzipped else {}),
    }
    # Output to pipes: a worker left alive would hold them open past the harness's exit.
    p = subprocess.run(
        [sys.executable, "-m", "profkit.harness", str(tmp_path / "job.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=100,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "info.json").read_text())["iteration_wall_ns"]
    assert marker.exists() == (worker or gzipped or not counting)  # the exit handlers ran
    torn_down = Path(f"{marker}.teardown").exists()  # Python's teardown collected the model
    assert torn_down == (worker or gzipped or not (counting or timing))
    # the workload's files and C output are written out however the harness ended
    assert Path(f"{marker}.log").read_text() == "built\n"
    assert "printed by C" in p.stdout
    if gzipped:
        import gzip

        assert gzip.decompress(Path(f"{marker}.gz").read_bytes()) == b"built\n"
    if worker:
        pid = int((tmp_path / "exit.txt.pid").read_text())
        with pytest.raises(ProcessLookupError):
            for _ in range(50):  # multiprocessing's exit terminated and joined it
                os.kill(pid, 0)
                time.sleep(0.1)


@needs_torch
def test_the_counting_harness_ends_at_once_even_with_its_output_closed(tmp_path):
    """A workload that closed the harness's stdout leaves the counting process's fast exit a
    success, not a traceback."""
    marker = tmp_path / "exit.txt"
    workload = tmp_path / "closes_stdout.py"
    workload.write_text(
        (HERE / "workloads" / "leaves_workers.py").read_text()
        + "\n\nimport sys\nsys.stdout.close()\n"
    )
    job = {
        "spec": workloads.Spec(batch_size=2, device="cpu").as_dict(),
        "workload_path": str(workload),
        "warmup": 1,
        "iters": 1,
        "tag": "closes_stdout.fp32.eager",
        "info_path": str(tmp_path / "info.json"),
        "counting": True,
    }
    (tmp_path / "job.json").write_text(json.dumps(job))
    p = subprocess.run(
        [sys.executable, "-m", "profkit.harness", str(tmp_path / "job.json")],
        capture_output=True,
        text=True,
        env={**os.environ, "PROFKIT_TEST_MARKER": str(marker)},
        timeout=100,
    )
    assert p.returncode == 0 and not marker.exists(), p.stderr


@needs_torch
def test_harness_reports_workload_errors(tmp_path):
    job = {
        "spec": workloads.Spec(device="cpu").as_dict(),
        "workload_path": str(HERE / "workloads" / "broken_build.py"),
        "warmup": 0,
        "iters": 1,
        "tag": "x.fp32.eager",
        "info_path": str(tmp_path / "info.json"),
    }
    (tmp_path / "job.json").write_text(json.dumps(job))
    p = subprocess.run(
        [sys.executable, "-m", "profkit.harness", str(tmp_path / "job.json")],
        capture_output=True,
        text=True,
    )
    # The workload's traceback first (issue 24: it goes to the run's log), the one line last.
    assert p.returncode == 3 and p.stderr.strip().splitlines()[-1].startswith(
        "profkit-harness: error:"
    )
    assert (
        p.stderr.startswith("Traceback (most recent call last):")
        and 'broken_build.py", line 5' in p.stderr
    )


# Small inputs for the CPU: each catalog file keeps its input size in a module constant.
SMALL = {"SIZE": 32, "TOKENS": 8}
MATRIX = [(w.name, p, m) for w in workloads.catalog() for p in w.precisions for m in w.modes]
# Each precision and mode once, on the first catalog workload that has it, in the quick tier; the
# rest of the matrix (~100 CPU runs, half the suite's time) in the slow one, CI's second step.
_FIRST = {(p, m): (n, p, m) for n, p, m in reversed(MATRIX)}
CATALOG_RUNS = [
    pytest.param(*c, marks=() if _FIRST[c[1:]] == c else pytest.mark.slow) for c in MATRIX
]
REFUSED = [
    (w.name, p, m)
    for w in workloads.catalog()
    for p in workloads.PRECISIONS
    for m in workloads.MODES
    if p not in w.precisions or m not in w.modes
]


def _small(name: str):
    _, path = workloads.resolve(name)
    module = workloads.load_module(path)
    for constant, value in SMALL.items():
        if hasattr(module, constant):
            setattr(module, constant, value)
    return module, path


@needs_torch
@pytest.mark.parametrize("name, precision, mode", CATALOG_RUNS)
def test_every_catalog_workload_steps_on_cpu_in_every_precision_and_mode_it_supports(
    name, precision, mode
):
    """Every built-in x precision x mode it declares, one step at batch 2 on small inputs: the
    output (a training step's loss) comes out finite, in the precision asked for."""
    import warnings

    import torch

    module, path = _small(name)
    # Batch 2: a training step's BatchNorm needs more than one value per channel at 1x1.
    spec = workloads.Spec(batch_size=2, precision=precision, mode=mode, device="cpu")
    workloads.check_supported(module, spec, path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracing a transformer warns about its control flow
        out = workloads.prepare(module, spec)()
    outs = (
        [out]
        if isinstance(out, torch.Tensor)
        else [t for t in (out or []) if isinstance(t, torch.Tensor)]
    )
    if name.endswith("_zoo"):
        return  # reference workloads: their steps run one call per precision or backend, and return nothing
    assert outs and all(bool(o.float().isfinite().all()) for o in outs)
    if name.endswith("_train"):
        assert outs[0].dim() == 0  # the loss
    # under autocast the last layer decides (a LayerNorm's output stays fp32)
    elif precision != "amp":
        assert (
            outs[0].dtype
            == {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
        )


@pytest.mark.parametrize("name, precision, mode", REFUSED)
def test_every_unsupported_combination_is_refused_before_anything_runs(name, precision, mode):
    """What a workload does not declare is refused from its file alone (no torch, nothing
    written), naming what it supports."""
    _, path = workloads.resolve(name)
    spec = workloads.Spec(batch_size=1, precision=precision, mode=mode, device="cpu")
    with pytest.raises(WorkloadError, match=r"does not support (precision|mode) .*It supports"):
        workloads.check_declared(path, spec)


@pytest.mark.parametrize(
    "name, precision, mode",
    [("resnet50_train", "fp16", "eager"), ("bert_encoder_train", "fp32", "torchscript")],
)
def test_a_training_step_refuses_what_it_does_not_support(name, precision, mode):
    _, path = workloads.resolve(name)
    spec = workloads.Spec(batch_size=1, precision=precision, mode=mode, device="cpu")
    with pytest.raises(WorkloadError, match="supports"):
        workloads.check_supported(workloads.load_module(path), spec, path)


def test_the_catalog_lists_what_each_workload_supports():
    """`profkit workloads`: every catalog model, with its precisions and modes, read without torch."""
    rows = {r.name: r for r in workloads.catalog()}
    assert {
        "vgg16",
        "resnet18",
        "resnet50",
        "mobilenet_v2",
        "efficientnet_b0",
        "bert_encoder",
        "gpt_decoder",
        "resnet18_train",
        "resnet50_train",
        "bert_encoder_train",
    } <= set(rows)
    assert list(rows["resnet50_train"].precisions) == ["fp32", "amp"] and list(
        rows["resnet50_train"].modes
    ) == ["eager"]
    assert list(rows["gpt_decoder"].modes) == ["eager", "torchscript", "compile"]


@needs_torch
@pytest.mark.parametrize(
    "name, spec, message",
    [
        ("bert_encoder", dict(precision="fp16", keep_bn_fp32=True), "has no BatchNorm layers"),
        ("precision_zoo", dict(precision="fp16", keep_bn_fp32=True), "builds its own step"),
        ("precision_zoo", dict(channels_last=True), "does not say that it applies channels-last"),
        (
            str(HERE / "workloads" / "tiny_classifier.py"),
            dict(channels_last=True),
            "inputs have none",
        ),
    ],
)
def test_options_that_cannot_apply_fail_when_built(name, spec, message):
    """An option that would silently do nothing is refused when the workload is built."""
    _, path = workloads.resolve(name)
    with pytest.raises(WorkloadError, match=message):
        workloads.prepare(
            workloads.load_module(path), workloads.Spec(batch_size=1, device="cpu", **spec)
        )


@needs_torch
def test_options_apply_on_the_cpu():
    """--keep-bn-fp32 leaves BatchNorm in fp32 inside an fp16 model; --channels-last lays the
    input out channels-last; a training step applies channels-last itself."""
    import torch

    module = workloads.load_module(workloads.resolve("resnet18")[1])
    module.SIZE = 32
    spec = workloads.Spec(
        batch_size=2, precision="bf16", device="cpu", keep_bn_fp32=True, channels_last=True
    )
    out = workloads.prepare(module, spec)()
    assert out.dtype == torch.bfloat16 and out.shape == (2, 1000)
    train = workloads.load_module(workloads.resolve("resnet18_train")[1])
    train.SIZE = 32
    loss = workloads.prepare(
        train, workloads.Spec(batch_size=2, precision="amp", device="cpu", channels_last=True)
    )()
    assert loss.dim() == 0 and bool(loss.isfinite())


def test_what_a_file_declares_is_read_without_running_it(tmp_path):
    f = tmp_path / "w.py"
    f.write_text('MODES = "eager"\nCHANNELS_LAST = False\ndef build(spec):\n    pass\n')
    assert workloads.declared(f) == {"MODES": ("eager",), "CHANNELS_LAST": False}
    workloads.check_declared(f, workloads.Spec(device="cpu"))  # the one mode, not its letters
    with pytest.raises(WorkloadError, match="does not support mode 'compile'. It supports eager"):
        workloads.check_declared(f, workloads.Spec(device="cpu", mode="compile"))
    with pytest.raises(WorkloadError, match="no image"):
        workloads.check_declared(f, workloads.Spec(device="cpu", channels_last=True))
    f.write_text("def build(:\n")
    with pytest.raises(WorkloadError, match="failed to import: SyntaxError"):
        workloads.declared(f)
    f.write_text("from elsewhere import *\n")
    assert workloads.declared(f) == {}  # `build` may come from there: loading it decides


def test_a_stream_of_the_workloads_own_kind_takes_the_normal_exit(tmp_path):
    """A writable stream of a kind profkit does not know (a cloud-storage library's, whose write
    raises its own error) is left to Python's teardown: the fast exit gives way, and the
    process ends normally with its status, the stream's error ignored there as always."""
    script = tmp_path / "fails.py"
    script.write_text(
        "import io\n"
        "from profkit.processes import leave\n"
        "class Remote(io.RawIOBase):\n"
        "    def writable(self):\n"
        "        return True\n"
        "    def write(self, b):\n"
        "        raise RuntimeError('the bucket went away')\n"
        "f = io.BufferedWriter(Remote())\n"
        "f.write(b'kept in the buffer')\n"
        "leave(0, exit_handlers=True)\n"
        "print('ended normally')\n"
    )
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "ended normally\n"
