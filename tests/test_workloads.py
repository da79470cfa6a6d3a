"""Workloads and the harness on the CPU: built-ins and users' files build and step in every
precision and mode, and the measured iterations are timed and named as the filters expect."""

from __future__ import annotations

import json
import subprocess
import sys
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


@needs_torch
def test_harness_runs_measured_iterations(tmp_path):
    tag = nvtx_ranges.tag("resnet18", "fp32", "eager")
    job = {"spec": workloads.Spec(batch_size=1, device="cpu").as_dict(),
           "workload_path": str(workloads.resolve("resnet18")[1]), "warmup": 1, "iters": 2,
           "tag": tag, "info_path": str(tmp_path / "info.json")}
    (tmp_path / "job.json").write_text(json.dumps(job))
    subprocess.run([sys.executable, "-m", "profkit.harness", str(tmp_path / "job.json")], check=True)
    info = json.loads((tmp_path / "info.json").read_text())
    assert len(info["iteration_wall_ns"]) == 2 and all(t > 0 for t in info["iteration_wall_ns"])
    assert info["torch_version"]


@needs_torch
def test_harness_reports_workload_errors(tmp_path):
    job = {"spec": workloads.Spec(device="cpu").as_dict(), "workload_path": str(HERE / "workloads" / "broken_build.py"),
           "warmup": 0, "iters": 1, "tag": "x.fp32.eager", "info_path": str(tmp_path / "info.json")}
    (tmp_path / "job.json").write_text(json.dumps(job))
    p = subprocess.run([sys.executable, "-m", "profkit.harness", str(tmp_path / "job.json")], capture_output=True, text=True)
    assert p.returncode == 3 and p.stderr.strip().startswith("profkit-harness: error:")


CATALOG_ON_CPU = [  # (workload, precision, mode, output shape): batch 1, a step each
    ("mobilenet_v2", "fp32", "eager", (1, 1000)), ("mobilenet_v2", "bf16", "torchscript", (1, 1000)),
    ("efficientnet_b0", "fp32", "torchscript", (1, 1000)), ("efficientnet_b0", "bf16", "eager", (1, 1000)),
    ("bert_encoder", "fp32", "torchscript", (1, 128, 768)), ("bert_encoder", "bf16", "eager", (1, 128, 768)),
    ("gpt_decoder", "fp32", "eager", (1, 128, 50257)), ("gpt_decoder", "amp", "torchscript", (1, 128, 50257)),
    ("resnet50_train", "fp32", "eager", ()), ("bert_encoder_train", "fp32", "eager", ()),
]


@needs_torch
@pytest.mark.parametrize("name, precision, mode, shape", CATALOG_ON_CPU)
def test_catalog_workloads_step_on_cpu(name, precision, mode, shape):
    """The catalog's models and training steps build and step on the CPU (a training step
    returns its loss)."""
    import warnings

    _, path = workloads.resolve(name)
    module = workloads.load_module(path)
    spec = workloads.Spec(batch_size=1, precision=precision, mode=mode, device="cpu")
    workloads.check_supported(module, spec, path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracing a transformer warns about its control flow
        step = workloads.prepare(module, spec)
        out = step()
        step()
    assert tuple(out.shape) == shape and bool(out.isfinite().all())


@pytest.mark.parametrize("name, precision, mode", [("resnet50_train", "fp16", "eager"),
                                                   ("bert_encoder_train", "fp32", "torchscript")])
def test_a_training_step_refuses_what_it_does_not_support(name, precision, mode):
    _, path = workloads.resolve(name)
    spec = workloads.Spec(batch_size=1, precision=precision, mode=mode, device="cpu")
    with pytest.raises(WorkloadError, match="supports"):
        workloads.check_supported(workloads.load_module(path), spec, path)


def test_the_catalog_lists_what_each_workload_supports():
    """`profkit workloads`: every catalog model, with its precisions and modes, read without torch."""
    rows = {r["name"]: r for r in workloads.catalog()}
    assert {"vgg16", "resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "bert_encoder", "gpt_decoder",
            "resnet18_train", "resnet50_train", "bert_encoder_train"} <= set(rows)
    assert rows["resnet50_train"]["precisions"] == ["fp32", "amp"] and rows["resnet50_train"]["modes"] == ["eager"]
    assert rows["gpt_decoder"]["modes"] == ["eager", "torchscript", "compile"]
