"""``profkit doctor``: what this machine can profile, one check a line (ok, warn or fail), each
with what to do about it. The checks run the tools for real where that is the only way to
know: a tiny kernel under ncu for counter permission, a tiny capture through nsys for its
importer (the missing-``libdw`` case).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import ProfkitError
from .tools import runner

OK, WARN, FAIL = "ok", "warn", "fail"
MIN_FREE_GB = 5.0  # raw captures: an ncu report is tens of MB, an nsys one can be GBs
# A tiny CUDA kernel from PyTorch, for the tools to capture.
TINY = "import torch; x = torch.ones(1024, device='cuda'); (x * 2).sum().item(); torch.cuda.synchronize()"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok, warn, fail
    detail: str
    advice: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _run(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    try:
        rc, out, err = runner.probe(argv, timeout)
    except (OSError, ProfkitError) as exc:
        return -1, str(exc)
    return rc, out + err


def check_gpu() -> tuple[Check, bool]:
    from . import gpu

    smi = shutil.which("nvidia-smi")
    if not smi:
        return Check(
            "GPU",
            WARN,
            "no nvidia-smi: no NVIDIA driver here",
            "Profile CPU operators with --device cpu, or install the NVIDIA driver.",
        ), False
    found = gpu.query()
    rc, out = _run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], timeout=30)
    driver = out.strip().splitlines()[0] if rc == 0 and out.strip() else "?"
    if not found:
        return Check(
            "GPU",
            FAIL,
            f"nvidia-smi sees no GPU (driver {driver})",
            "Check the driver and the GPU's visibility "
            "(CUDA_VISIBLE_DEVICES, the container's --gpus).",
        ), False
    return Check("GPU", OK, f"{found[0]} (sm {found[1]}), driver {driver}"), True


def check_torch(has_gpu: bool) -> tuple[Check, bool]:
    rc, out = _run(
        runner.python_argv(
            "-c",
            "import torch; print(torch.__version__, torch.version.cuda, "
            "torch.cuda.is_available(), torch.cuda.device_count())",
        ),
        timeout=120,
    )
    if rc != 0:
        return Check(
            "PyTorch",
            FAIL,
            "not importable: " + (out.strip().splitlines() or ["?"])[-1][:200],
            "pip install 'profkit[torch]' (or torch and torchvision).",
        ), False
    version, cuda, available, count = out.split()[-4:]
    if available == "True":
        return Check("PyTorch", OK, f"torch {version} (CUDA {cuda}) sees {count} GPU(s)"), True
    status = FAIL if has_gpu else WARN
    why = "a CPU-only build" if cuda == "None" else "no GPU visible to it"
    return Check(
        "PyTorch",
        status,
        f"torch {version}: {why}",
        "Install a CUDA build of torch matching the driver."
        if cuda == "None"
        else "Check CUDA_VISIBLE_DEVICES and the driver; --device cpu still works.",
    ), False


def _find_tool(module: Any, name: str, product: str, use: str) -> tuple[str | None, Check]:
    """(the executable, or None, and its check line): found and answering with a version?"""
    try:
        exe = module.find()
    except ProfkitError:
        return None, Check(name, WARN, f"{product} ({name}) not found", f"Install {product} {use}.")
    try:
        version = module.version(exe)
    except ProfkitError as exc:
        return None, Check(
            name, FAIL, f"{exe} does not run: {exc.message}", f"Reinstall {product}."
        )
    return exe, Check(name, OK, f"{exe}, version {version}")


def _tool_checks(
    module: Any,
    name: str,
    product: str,
    use: str,
    trial: str,
    try_it: Callable[[str], Check],
    torch_gpu: bool,
) -> list[Check]:
    """The tool's own line, then the line of trying it on a tiny kernel (where there is a GPU)."""
    exe, found = _find_tool(module, name, product, use)
    if exe is None:
        return [found]
    if not torch_gpu:
        return [found, Check(trial, WARN, "not tried: PyTorch sees no GPU to run a tiny kernel on")]
    return [found, try_it(exe)]


def check_ncu(torch_gpu: bool) -> list[Check]:
    from .tools import ncu

    return _tool_checks(
        ncu,
        "ncu",
        "Nsight Compute",
        "for counter-backed verdicts; --tool nsys or torch work without it",
        "ncu counters",
        _try_ncu,
        torch_gpu,
    )


def _try_ncu(exe: str) -> Check:
    rc, text = _run(
        [
            exe,
            "--metrics",
            "gpu__time_duration.sum",
            "--target-processes",
            "all",
            *runner.python_argv("-c", TINY),
        ],
        timeout=300,
    )
    if "ERR_NVGPUCTRPERM" in text:
        return Check(
            "ncu counters",
            FAIL,
            "ERR_NVGPUCTRPERM: this user may not read the GPU's counters",
            "Run as root, or allow it: options nvidia NVreg_RestrictProfilingToAdminUsers=0 "
            "(https://developer.nvidia.com/ERR_NVGPUCTRPERM); --tool nsys or torch meanwhile.",
        )
    if rc == 0 and "gpu__time_duration.sum" in text:
        return Check("ncu counters", OK, "a tiny kernel profiled with gpu__time_duration.sum")
    return Check(
        "ncu counters",
        FAIL,
        f"ncu could not profile a tiny kernel (exit {rc}): {_last_line(text)}",
        "Run that ncu command by hand to see why.",
    )


def _last_line(text: str) -> str:
    return ([line for line in text.strip().splitlines() if line.strip()][-1:] or ["no output"])[0][
        :200
    ]


def check_nsys(torch_gpu: bool) -> list[Check]:
    from .tools import nsys

    return _tool_checks(
        nsys,
        "nsys",
        "Nsight Systems",
        "for timelines of training steps and CUDA graphs; --tool torch gives a timeline without it",
        "nsys import",
        _try_nsys,
        torch_gpu,
    )


def _try_nsys(exe: str) -> Check:
    with tempfile.TemporaryDirectory(prefix="profkit-doctor-") as tmp:
        rep = Path(tmp) / "tiny"
        rc, text = _run(
            [
                exe,
                "profile",
                "--trace",
                "cuda",
                "--sample",
                "none",
                "--cpuctxsw",
                "none",
                "--output",
                str(rep),
                "--force-overwrite",
                "true",
                *runner.python_argv("-c", TINY),
            ],
            timeout=300,
        )
        if rep.with_suffix(".nsys-rep").exists():
            return Check("nsys import", OK, "a tiny capture became a .nsys-rep")
        if rep.with_suffix(".qdstrm").exists():
            return Check(
                "nsys import",
                FAIL,
                "nsys left a raw .qdstrm: its importer (QdstrmImporter) cannot run",
                "In containers it usually lacks libdw.so.1: install elfutils / libdw1; profkit imports "
                "a .qdstrm once the importer runs.",
            )
        return Check(
            "nsys import",
            FAIL,
            f"nsys could not capture a tiny kernel (exit {rc}): {_last_line(text)}",
            "Run that nsys command by hand to see why.",
        )


def check_database(db: str | os.PathLike[str] | None) -> list[Check]:
    from .store import Store
    from .store.database import db_path

    path = db_path(db)
    folder = path.resolve().parent
    out = []
    if path.exists():
        try:
            store = Store(path, create=False)
            try:
                if store.read_only:  # opened so where its folder (or disk) takes no file beside it
                    out.append(
                        Check(
                            "database",
                            WARN,
                            f"{path}: {len(store.runs())} runs, readable but not writable "
                            "here (its folder, or the disk, takes no file beside it)",
                            "Read commands work; to run or import, use a database in a folder of your own.",
                        )
                    )
                else:
                    with store.write():
                        pass  # the write lock can be taken: writable
                    out.append(Check("database", OK, f"{path}: {len(store.runs())} runs, writable"))
            finally:
                store.close()
        except ProfkitError as exc:
            out.append(
                Check(
                    "database",
                    FAIL,
                    exc.message,
                    exc.hint or "Choose another --db, or fix the file's permissions.",
                )
            )
    elif not folder.exists():
        out.append(
            Check(
                "database",
                FAIL,
                f"{path}: its folder {folder} does not exist",
                "Choose another --db.",
            )
        )
    elif os.access(folder, os.W_OK):
        out.append(Check("database", OK, f"{path} does not exist yet; {folder} is writable"))
    else:
        out.append(
            Check(
                "database", FAIL, f"{path}: cannot create files in {folder}", "Choose another --db."
            )
        )
    if folder.exists():
        free = shutil.disk_usage(folder).free / 1e9
        out.append(
            Check(
                "disk",
                OK if free >= MIN_FREE_GB else WARN,
                f"{free:,.1f} GB free beside the database (raw captures go to {path.stem}-runs/)",
                None
                if free >= MIN_FREE_GB
                else "Free some space or put --db elsewhere: nsys captures can take GBs.",
            )
        )
    return out


def checks(db: str | os.PathLike[str] | None = None) -> list[Check]:
    """Every check, in order: GPU and driver, PyTorch, ncu and its counters, nsys and its
    importer, the database and the disk beside it."""
    gpu, has_gpu = check_gpu()
    torch, torch_gpu = check_torch(has_gpu)
    return [gpu, torch, *check_ncu(torch_gpu), *check_nsys(torch_gpu), *check_database(db)]
