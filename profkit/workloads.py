"""The workload interface: what a workload file must provide, how built-ins and users' files
are found and loaded, and how profkit applies precision and mode to what a file builds.

A workload is a Python file with a ``build(spec)`` function. ``spec`` is a :class:`Spec`
(batch size, precision, mode, device). ``build`` returns either

* ``(model, inputs)``: an ``nn.Module`` and a tuple of example inputs built for
  ``spec.batch_size`` on the CPU in fp32. profkit moves both to ``spec.device``, applies the
  precision (casting the model and floating inputs, or autocast for ``amp``) and the mode
  (eager, ``torch.jit.trace`` for ``torchscript``, or ``torch.compile`` with
  ``spec.compile_mode`` for ``compile``), and times ``model(*inputs)`` under
  ``torch.inference_mode``; or
* a zero-argument callable: one step, already built for ``spec``, for workloads (training
  steps, multi-op sequences) that apply precision and mode themselves.

The file may also set ``DESCRIPTION`` (one line, shown by ``profkit workloads``) and
``PRECISIONS`` / ``MODES`` (what it supports, if not all). Built-ins live in the repository's
``workloads/`` folder, which ships inside the wheel as the package ``profkit.builtin_workloads``
(see :func:`builtin_dir`). Nothing here imports torch at module import time.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from .choices import CompileMode, Device, Mode, Precision, values
from .errors import WorkloadError, require_choice, require_int

PRECISIONS = values(Precision)
MODES = values(Mode)
DEVICES = values(Device)
COMPILE_MODES = values(CompileMode)

BUILTIN_PACKAGE = "profkit.builtin_workloads"


@dataclass(frozen=True)
class Spec:
    """What a workload is asked to build."""

    batch_size: int = 8
    precision: str = "fp32"
    mode: str = "eager"
    device: str = "cuda"
    compile_mode: str = "default"  # torch.compile's mode, for mode "compile"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def validate_spec(spec: Spec) -> None:
    require_choice("precision", spec.precision, PRECISIONS)
    require_choice("mode", spec.mode, MODES)
    require_choice("device", spec.device, DEVICES)
    require_int("batch_size", spec.batch_size, 1)
    require_choice("compile_mode", spec.compile_mode, COMPILE_MODES)


@functools.cache
def builtin_dir() -> Path | None:
    """The folder holding the built-in workload files, or None where there is none.

    Installed (wheel or editable), that is the package ``profkit.builtin_workloads``; in a source
    checkout that was never installed, the ``workloads/`` folder beside the ``profkit`` package.
    Workload files are handed to the harness by path, so only a real folder counts.
    """
    try:
        from importlib.resources import files

        root = files(BUILTIN_PACKAGE)
    except ModuleNotFoundError:  # not installed: running from the source tree
        root = None
    if isinstance(root, Path) and root.is_dir():
        return root.resolve()
    fallback = Path(__file__).resolve().parent.parent / "workloads"
    return fallback if fallback.is_dir() else None


def builtin_names() -> list[str]:
    """The built-in workloads' names, sorted (modules whose names start with ``_`` are not)."""
    folder = builtin_dir()
    if folder is None:
        return []
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_") and p.is_file())


def builtin_path(name: str) -> Path:
    """The file of the built-in workload ``name``; a WorkloadError if there is no such built-in."""
    if name not in builtin_names():
        names = ", ".join(builtin_names()) or "none installed"
        raise WorkloadError(
            f"unknown workload {name!r}",
            f"Built-ins: {names}; or give the path of a .py file that defines build(spec).",
        )
    folder = builtin_dir()
    assert folder is not None  # builtin_names() found the name in it
    return folder / f"{name}.py"


def builtins() -> list[tuple[str, str]]:
    """(name, one-line description) of each built-in workload, sorted by name; imports no torch."""
    return [(name, describe(builtin_path(name))) for name in builtin_names()]


def supports(path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The precisions and modes a workload file says it supports (``PRECISIONS``, ``MODES``;
    all where it says nothing), read without running it."""
    import ast

    found: dict[str, tuple[str, ...]] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if getattr(target, "id", None) in ("PRECISIONS", "MODES"):
                    try:
                        found[target.id] = tuple(ast.literal_eval(node.value))  # type: ignore[attr-defined]
                    except ValueError:
                        pass
    return found.get("PRECISIONS", PRECISIONS), found.get("MODES", MODES)


def catalog() -> list[dict[str, Any]]:
    """Each built-in workload: name, description, and the precisions and modes it supports."""
    out = []
    for name, description in builtins():
        precisions, modes = supports(builtin_path(name))
        out.append({"name": name, "description": description, "precisions": list(precisions), "modes": list(modes)})
    return out


def resolve(workload: str) -> tuple[str, Path]:
    """Map a built-in name or a path to (workload name, file path)."""
    if not isinstance(workload, str) or not workload:
        raise WorkloadError(f"a workload is a built-in's name or a .py file's path, not {workload!r}")
    looks_like_path = workload.endswith(".py") or "/" in workload or "\\" in workload
    if looks_like_path:
        path = Path(workload).expanduser()
        if not path.is_file():
            raise WorkloadError(f"workload file not found: {workload}")
        return path.stem, path.resolve()
    return workload, builtin_path(workload)


def load_module(path: Path):
    """Import a workload file as a module and check that it defines build()."""
    name = "profkit_workload_" + re.sub(r"\W", "_", path.stem)
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise WorkloadError(f"cannot load workload file {path}")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # the user's code: report, don't crash
        raise WorkloadError(f"workload file {path} failed to import: {type(exc).__name__}: {exc}") from exc
    if not callable(getattr(module, "build", None)):
        raise WorkloadError(f"workload file {path} defines no build(spec) function")
    return module


def describe(path: Path) -> str:
    """The first line of a workload file's DESCRIPTION or docstring, without importing torch."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DESCRIPTION" for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value.strip().splitlines()[0]
    doc = ast.get_docstring(tree)
    return doc.strip().splitlines()[0] if doc else ""


def check_supported(module, spec: Spec, path: Path) -> None:
    for attr, value in (("PRECISIONS", spec.precision), ("MODES", spec.mode)):
        allowed = getattr(module, attr, None)
        if allowed is not None and value not in allowed:
            raise WorkloadError(
                f"workload {path.stem} does not support {attr.lower()[:-1]} {value!r}",
                f"It supports {', '.join(allowed)}.",
            )


def _dtype(precision: str):
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)


def _cast(value, device, dtype):
    import torch

    if isinstance(value, torch.Tensor):
        value = value.to(device)
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, device, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _cast(v, device, dtype) for k, v in value.items()}
    return value


def prepare(module, spec: Spec) -> Callable[[], Any]:
    """Build the workload for ``spec`` and return one step as a zero-argument callable."""
    import torch

    try:
        built = module.build(spec)
    except Exception as exc:
        raise WorkloadError(f"workload build(spec) failed: {type(exc).__name__}: {exc}") from exc
    if callable(built) and not isinstance(built, torch.nn.Module):
        user_step: Callable[[], Any] = built  # applies spec's precision and mode itself
        return user_step
    if not (isinstance(built, tuple) and len(built) == 2 and isinstance(built[0], torch.nn.Module)):
        raise WorkloadError(
            "workload build(spec) must return (model, inputs) or a zero-argument step function"
        )
    model, inputs = built
    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    device = torch.device(spec.device)
    cast_dtype = None if spec.precision in ("fp32", "amp") else _dtype(spec.precision)
    model = model.eval().to(device)
    if cast_dtype is not None:
        model = model.to(cast_dtype)
    inputs = _cast(inputs, device, cast_dtype)

    if spec.precision == "amp":
        amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
        autocast = lambda: torch.autocast(device.type, dtype=amp_dtype)  # noqa: E731
    else:
        autocast = None

    if spec.mode == "compile":
        # Compiled lazily: the first call (a warm-up iteration) compiles, never a measured one.
        model = torch.compile(model, mode=spec.compile_mode)
    if spec.mode == "torchscript":
        import warnings

        with torch.no_grad(), warnings.catch_warnings():
            # torch.jit is deprecated upstream; users still compare it with eager.
            warnings.simplefilter("ignore", FutureWarning)
            if autocast:
                with autocast():
                    model = torch.jit.trace(model, inputs, check_trace=False)
            else:
                model = torch.jit.trace(model, inputs, check_trace=False)

    def step():
        with torch.inference_mode():
            if autocast:
                with autocast():
                    return model(*inputs)
            return model(*inputs)

    return step
