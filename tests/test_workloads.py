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
