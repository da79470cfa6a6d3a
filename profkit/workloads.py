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
import os
import re
import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .errors import WorkloadError, did_you_mean
from .options import COMPILE_MODES as COMPILE_MODES
from .options import DEVICES as DEVICES
from .options import MODES as MODES
from .options import PRECISIONS as PRECISIONS
from .options import SWITCHES  # Spec's home is options: the record of a run's options
from .options import Spec as Spec

if TYPE_CHECKING:
    import torch  # its types only (torch is imported where used, never at module import)

# A value holding tensors (a tensor, or lists, tuples and dicts of them), mapped keeping its shape.
Nested = TypeVar("Nested")

BUILTIN_PACKAGE = "profkit.builtin_workloads"


def option_labels(options: Mapping[str, bool] | None) -> list[str]:
    """How a run's recorded options read (BatchNorm fp32, channels-last, ...)."""
    return [SWITCHES.get(k, k) for k, on in (options or {}).items() if on]


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
            did_you_mean(
                name,
                builtin_names(),
                f"Built-ins: {names}; or give the path of a .py file that defines build(spec).",
            ),
        )
    folder = builtin_dir()
    assert folder is not None  # builtin_names() found the name in it
    return folder / f"{name}.py"


def builtins() -> list[tuple[str, str]]:
    """(name, one-line description) of each built-in workload, sorted by name; imports no torch."""
    return [(name, describe(builtin_path(name))) for name in builtin_names()]


def _names_build(node: Any) -> bool:
    """Whether ``build`` is defined, assigned or imported anywhere in ``node``."""
    import ast

    for n in ast.walk(node):
        if (
            isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.name == "build"
        ):
            return True
        if isinstance(n, ast.Name) and n.id == "build" and isinstance(n.ctx, ast.Store):
            return True
        if isinstance(n, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name) in ("build", "*") for a in n.names
        ):
            return True
    return False


def declared(path: Path) -> dict[str, Any]:
    """What a workload file declares at its top level (``PRECISIONS``, ``MODES``,
    ``CHANNELS_LAST``), read without running it. A file that does not parse, or defines no
    ``build``, is a WorkloadError (as loading it would be)."""
    import ast

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise WorkloadError(
            f"workload file {path} failed to import: {type(exc).__name__}: {exc}"
        ) from None
    found: dict[str, Any] = {}
    has_build = False
    for node in tree.body:
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.name == "build"
        ):
            has_build = True
        if isinstance(node, (ast.ImportFrom, ast.Import)):  # `from x import build`, or `*`: it may
            has_build = has_build or any((a.asname or a.name) in ("build", "*") for a in node.names)
        if not isinstance(
            node,
            (
                ast.FunctionDef,
                ast.AsyncFunctionDef,
                ast.ClassDef,
                ast.Assign,
                ast.Import,
                ast.ImportFrom,
                ast.Expr,
            ),
        ):
            # defined under an `if` or `try`: let loading the file decide, where `build` is named there
            has_build = has_build or _names_build(node)
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if getattr(target, "id", None) == "build":
                    has_build = True
                if getattr(target, "id", None) in ("PRECISIONS", "MODES", "CHANNELS_LAST"):
                    try:
                        value = ast.literal_eval(node.value)
                    except ValueError:
                        continue
                    # MODES = "eager" means the one mode, not its letters.
                    found[target.id] = (value,) if isinstance(value, str) else value  # type: ignore[attr-defined]
    if not has_build:
        raise WorkloadError(
            f"workload file {path} defines no build(spec) function",
            f"To profile it as it is, give it after --: profkit run -- python {path.name}",
        )
    return found


def supports(path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The precisions and modes a workload file says it supports (``PRECISIONS``, ``MODES``;
    all where it says nothing), read without running it."""
    found = declared(path)
    return tuple(found.get("PRECISIONS", PRECISIONS)), tuple(found.get("MODES", MODES))


def check_declared(path: Path, spec: Spec) -> None:
    """Refuse, before anything runs, what a workload file says it does not support."""
    import types

    try:
        found = declared(path)
        own_step = builds_own_step(path)
    except OSError:
        return  # loading it will say what is wrong
    check_supported(types.SimpleNamespace(**found), spec, path)
    if own_step:
        check_step_options(types.SimpleNamespace(**found), spec, path)


def builds_own_step(path: Path) -> bool:
    """Whether a workload file's ``build`` visibly returns a step of its own, read without running
    it: every ``return`` of its body gives a function defined in it (``def step(): ...; return
    step``, or a lambda). False where that cannot be told so (a call's result, a tuple): building
    it tells (:func:`prepare`)."""
    import ast

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return False
    build = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build"), None
    )
    if build is None:
        return False
    defined: set[str] = set()
    returned: list[ast.expr | None] = []
    todo: list[ast.AST] = list(build.body)
    while todo:  # build's own statements, not those of the functions it defines
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
            continue
        if isinstance(node, (ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if isinstance(node, ast.Return):
            returned.append(node.value)
        todo.extend(ast.iter_child_nodes(node))
    return bool(returned) and all(
        isinstance(v, ast.Lambda) or (isinstance(v, ast.Name) and v.id in defined) for v in returned
    )


def check_step_options(module: object, spec: Spec, path: Path) -> None:
    """Refuse what a workload that builds its own step would be asked and could leave undone,
    profkit applying nothing to a step: a precision or mode other than the default unless its
    file declares the ones its build(spec) applies (``PRECISIONS``, ``MODES``), channels-last
    unless it says it applies it (``CHANNELS_LAST = True``), and BatchNorm in fp32 (profkit casts
    no model of a step). Otherwise its run would be stored under a label it never had.
    ``module``: the workload's module, or anything with its declarations as attributes."""
    default = Spec()
    for option, attr in (("precision", "PRECISIONS"), ("mode", "MODES")):
        value = getattr(spec, option)
        if value != getattr(default, option) and getattr(module, attr, None) is None:
            raise WorkloadError(
                f"workload {path.stem} builds its own step and does not say that it applies "
                f"`{option}` {value}: profkit applies nothing to a step",
                f"Set {attr} = (...) in its file to what its build(spec) applies from spec.{option}, "
                f"or leave out `{option}`.",
            )
    if spec.channels_last and getattr(module, "CHANNELS_LAST", None) is not True:
        raise WorkloadError(
            f"workload {path.stem} builds its own step and does not say that it applies channels-last",
            "Set CHANNELS_LAST = True in its file once its build(spec) honours spec.channels_last.",
        )
    if spec.keep_bn_fp32:
        raise WorkloadError(
            f"workload {path.stem} builds its own step, so profkit casts no model whose BatchNorm "
            "it could keep in fp32",
            "Leave out `keep_bn_fp32` for it.",
        )


@dataclass(frozen=True)
class WorkloadEntry:
    """A built-in workload: its name, one line on what it is, what it supports."""

    name: str
    description: str
    precisions: tuple[str, ...]
    modes: tuple[str, ...]


def catalog() -> list[WorkloadEntry]:
    """Each built-in workload: name, description, and the precisions and modes it supports."""
    return [
        WorkloadEntry(name, description, *supports(builtin_path(name)))
        for name, description in builtins()
    ]


def looks_like_path(workload: str) -> bool:
    """Whether a workload is named by a file's path (else a built-in's name)."""
    return workload.endswith(".py") or "/" in workload or "\\" in workload


def resolve(workload: str) -> tuple[str, Path]:
    """Map a built-in name or a path to (workload name, file path)."""
    if not isinstance(workload, str) or not workload:
        raise WorkloadError(
            f"a workload is a built-in's name or a .py file's path, not {workload!r}"
        )
    if looks_like_path(workload):
        path = Path(workload).expanduser()
        if not path.is_file():
            raise WorkloadError(f"workload file not found: {workload}")
        return path.stem, path.resolve()
    return workload, builtin_path(workload)


def load_module(path: Path) -> ModuleType:
    """Import a workload file as a module and check that it defines build().

    The file's own folder goes on ``sys.path``, so that the modules beside it import (``import
    helper`` from ``my_model.py``), wherever profkit was started; it goes last, so that nothing
    beside the workload stands in for an installed module (torch, numpy, nvtx, profkit). The
    current folder is not on the path (profkit starts this process with ``-P``). A folder
    other users may add files to (:func:`import_folder_untrusted`) is not put on the path: a
    module planted there under the name of an optional import that is missing (torch probes
    many) would run as this user."""
    folder = str(path.resolve().parent)
    why_not = import_folder_untrusted(folder)
    if why_not is None and folder not in sys.path:
        sys.path.append(folder)
    name = "profkit_workload_" + re.sub(r"\W", "_", path.stem)
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise WorkloadError(f"cannot load workload file {path}")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # the user's code: report, don't crash
        aside = (
            f" (its folder {folder} is not on the import path: it {why_not})"
            if why_not is not None and isinstance(exc, ImportError)
            else ""
        )
        raise WorkloadError(
            f"workload file {path} failed to import: {type(exc).__name__}: {exc}{aside}"
        ) from exc
    if not callable(getattr(module, "build", None)):
        raise WorkloadError(f"workload file {path} defines no build(spec) function")
    return module


def import_folder_untrusted(folder: str) -> str | None:
    """Why the modules in ``folder`` are not to be imported, or None: trusted is a folder owned
    by this user or root that neither group nor others may write. A sticky folder (``/tmp``)
    is not: anyone may add a new file to it, and a new module is all it takes."""
    try:
        st = os.stat(folder)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if st.st_uid not in (os.geteuid(), 0):
        return f"belongs to user {st.st_uid}"
    if st.st_mode & 0o022:
        return "may be added to by other users (writable by group or others)"
    return None


def describe(path: Path) -> str:
    """The first paragraph of a workload file's DESCRIPTION or docstring, as one line (a sentence
    is not cut where the source breaks its line), without importing torch."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "DESCRIPTION" for t in node.targets
        ):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return _first_paragraph(node.value.value)
    doc = ast.get_docstring(tree)
    return _first_paragraph(doc) if doc else ""


def _first_paragraph(text: str) -> str:
    return " ".join(text.strip().split("\n\n")[0].split())


def check_supported(module: object, spec: Spec, path: Path) -> None:
    """``module``: the workload's module, or anything with its declarations as attributes."""
    for attr, value in (("PRECISIONS", spec.precision), ("MODES", spec.mode)):
        allowed = getattr(module, attr, None)
        if isinstance(allowed, str):
            allowed = (allowed,)
        if allowed is not None and value not in allowed:
            raise WorkloadError(
                f"workload {path.stem} does not support {attr.lower()[:-1]} {value!r}",
                f"It supports {', '.join(allowed)}.",
            )
    if spec.channels_last and getattr(module, "CHANNELS_LAST", None) is False:
        raise WorkloadError(
            f"workload {path.stem} has no image (4-D) tensors to lay out channels-last",
            "Leave out `channels_last` for it.",
        )


def keep_batchnorm_fp32(model: torch.nn.Module) -> int:
    """Put ``model``'s BatchNorm layers back in fp32 after a cast to fp16/bf16, as users do by
    hand (``.half()`` then ``bn.float()``): cuDNN's batch norm takes half inputs with fp32
    weights, and running statistics keep their precision. Returns how many there were."""
    import torch

    layers = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in layers:
        m.float()
    return len(layers)


def _dtype(precision: str) -> torch.dtype | None:
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)


def _map_tensors(value: Nested, fn: Callable[[torch.Tensor], torch.Tensor]) -> Nested:
    """``value`` with ``fn`` applied to every tensor in it (inside lists, tuples and dicts)."""
    import torch

    # The casts: a tensor for a tensor (torch is untyped here), and a list, tuple or dict of the
    # same type for one (mypy narrows a type variable by isinstance to the bare container).
    if isinstance(value, torch.Tensor):
        return cast(Nested, fn(value))
    if isinstance(value, (list, tuple)):
        return cast(Nested, type(value)(_map_tensors(v, fn) for v in value))
    if isinstance(value, dict):
        return cast(Nested, {k: _map_tensors(v, fn) for k, v in value.items()})
    return value


def _cast(value: Nested, device: torch.device, dtype: torch.dtype | None) -> Nested:
    def moved(t: torch.Tensor) -> torch.Tensor:
        t = t.to(device)
        return t.to(dtype) if dtype is not None and t.is_floating_point() else t

    return _map_tensors(value, moved)


def prepare(module: ModuleType, spec: Spec) -> Callable[[], Any]:
    """Build the workload for ``spec`` and return one step as a zero-argument callable."""
    import torch

    if spec.device == "cuda":
        torch.backends.cudnn.benchmark = spec.cudnn_benchmark
    try:
        built = module.build(spec)
    except Exception as exc:
        raise WorkloadError(f"workload build(spec) failed: {type(exc).__name__}: {exc}") from exc
    where = Path(getattr(module, "__file__", "") or "workload")  # for messages
    if callable(built) and not isinstance(built, torch.nn.Module):
        user_step: Callable[[], Any] = built  # applies spec's precision, mode and options itself
        check_step_options(module, spec, where)
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
        if spec.keep_bn_fp32 and not keep_batchnorm_fp32(model):
            raise WorkloadError(
                f"workload {where.stem} has no BatchNorm layers to keep in fp32",
                "Leave out `keep_bn_fp32` for it.",
            )
    inputs = _cast(inputs, device, cast_dtype)
    if spec.channels_last:
        tensors: list[torch.Tensor] = []
        _map_tensors(inputs, tensors.append)
        images = [t for t in tensors if t.dim() == 4 and t.is_floating_point()]
        if not images:
            raise WorkloadError(
                f"`channels_last` lays out 4-D image tensors, and workload {where.stem}'s inputs "
                "have none",
                "Leave out `channels_last` for it.",
            )
        model = model.to(memory_format=torch.channels_last)
        inputs = _map_tensors(
            inputs, lambda t: t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t
        )

    autocast: Callable[[], AbstractContextManager[Any]] | None = None
    if spec.precision == "amp":
        amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
        autocast = lambda: torch.autocast(device.type, dtype=amp_dtype)  # noqa: E731

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

    def step() -> Any:  # the model's output
        with torch.inference_mode():
            if autocast:
                with autocast():
                    return model(*inputs)
            return model(*inputs)

    return step
