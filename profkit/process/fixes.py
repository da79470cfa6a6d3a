"""The fixes profkit applies inside a profiled (or timed) process, without the workload's or the
script's code knowing: what ``--tf32``, ``--fused-optimizer``, ``--cudnn-attention`` and ``--sdpa-attention`` do in any
process, and what
``profkit tune`` tries on a user's program from outside it.

- **Process switches** (:func:`apply_switches`), before anything is built: TF32 for fp32 matmuls
  (``torch.set_float32_matmul_precision("high")``), optimizers made with ``fused=True``
  (:func:`fuse_optimizers`: Adam, AdamW, SGD and Adagrad made after it, on the GPU, where the
  caller chose neither ``fused`` nor ``foreach``), cuDNN's attention tried first by
  ``scaled_dot_product_attention`` (:func:`cudnn_attention_first`), and Hugging Face models
  made with their eager attention switched to SDPA (:func:`sdpa_attention`).
- **The model's fixes** (:class:`ModelFixes`, a program's): the program's model is the first
  module with parameters called outside any other module; channels-last (its weights and its
  4-D inputs), bf16 autocast around its calls (no loss scaler needed, so none is added), and
  ``torch.compile`` are applied to it when it is first called. Its output on that first call,
  in eval mode, is saved (the first tensor, as fp32 on the CPU): what ``profkit tune`` compares.

torch is the caller's (imported by the process already); nothing here imports it at module level.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..errors import WorkloadError

# The optimizers PyTorch has a fused (single-kernel) implementation of, on CUDA.
FUSABLE_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")
# What ModelFixes applies to a program's model (``profkit tune``'s fix ids).
MODEL_FIXES = ("channels_last", "amp", "compile", "compile_reduce_overhead")
# Set while ModelFixes runs the model once more for its output: calls that are not the program's.
REPLAY = threading.local()


def replaying() -> bool:
    """Whether this thread is in ModelFixes' extra call of the model (see ``_first``)."""
    return getattr(REPLAY, "on", False)


def apply_switches(torch: Any, spec: Any, info: dict[str, Any]) -> None:
    """The spec's process switches, before the workload or the script builds anything. A switch
    this process cannot apply is a WorkloadError naming its flag (one line, no traceback)."""
    for name, apply in _SWITCHES.items():
        if not getattr(spec, name, False):
            continue
        try:
            apply(torch, info)
        except WorkloadError:
            raise
        except Exception as exc:
            raise WorkloadError(
                f"--{name.replace('_', '-')} could not be applied in this process: "
                f"{type(exc).__name__}: {exc}"
            ) from exc


def _tf32(torch: Any) -> None:
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True


# The scaled_dot_product_attention backends after cuDNN's, in PyTorch's own order: a call cuDNN
# does not take (fp32, a head size or mask it lacks) goes on to these as it did before.
_AFTER_CUDNN = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")
# The priority set by cudnn_attention_first, held for the life of the process: the context
# manager restores the previous order when it is closed, and a generator is closed when collected.
_HELD: list[Any] = []


def cudnn_attention_first(torch: Any) -> list[str]:
    """Make ``scaled_dot_product_attention`` try cuDNN's fused attention first. PyTorch's own
    order puts flash and memory-efficient attention first, math, then cuDNN's, except where it
    prefers cuDNN's (Hopper and later, in recent versions); as the math backend takes every
    call, cuDNN's kernels otherwise run only where asked for. The backends that are on keep
    their order after it. Returns the order set, by backend name. Needs torch 2.6 or later
    (``sdpa_kernel``'s ``set_priority``)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if "set_priority" not in inspect.signature(sdpa_kernel).parameters:
        raise WorkloadError(
            f"--cudnn-attention sets the attention backends' order, which torch "
            f"{torch.__version__} cannot (torch 2.6 or later can)"
        )
    on = {
        "FLASH_ATTENTION": torch.backends.cuda.flash_sdp_enabled(),
        "EFFICIENT_ATTENTION": torch.backends.cuda.mem_efficient_sdp_enabled(),
        "MATH": torch.backends.cuda.math_sdp_enabled(),
    }
    order = ["CUDNN_ATTENTION", *(name for name in _AFTER_CUDNN if on[name])]
    held = sdpa_kernel([getattr(SDPBackend, name) for name in order], set_priority=True)
    held.__enter__()
    _HELD.append(held)
    return [name.lower() for name in order]


# transformers' module that defines PreTrainedModel (whose post_init ends every model's __init__)
HF_MODELING = "transformers.modeling_utils"


def sdpa_attention() -> list[str]:
    """Make every Hugging Face model made from now on with its "eager" attention (the scores,
    softmax and weighted values as separate operators) run PyTorch's fused
    ``scaled_dot_product_attention`` instead, through transformers' own
    ``PreTrainedModel.set_attn_implementation("sdpa")`` (its sub-models too) once it is made.
    transformers is not imported here: its model class is wrapped when the workload or script
    imports it (an import hook), so that what it reads at import (its cache, offline mode) is
    the script's. Returns the list it appends each switched model's class name to, or ``"Name
    (not switched: why)"``: empty where no such model is made (or transformers never imported)."""
    made: list[str] = []
    loaded = sys.modules.get(HF_MODELING)
    if loaded is not None:
        _wrap_post_init(loaded, made)
    else:
        sys.meta_path.insert(
            0, _AfterImport(HF_MODELING, lambda module: _wrap_post_init(module, made))
        )
    return made


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` once the module ``name`` has been executed by its own loader, the
    first time it is imported; finds nothing itself (the other finders find it) and leaves
    ``sys.meta_path`` after that first import."""

    def __init__(self, name: str, then: Any) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module
        then = self.then

        def exec_module(module: Any) -> None:
            run(module)
            then(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # this spec's own loader
        return spec


def _wrap_post_init(module: Any, made: list[str]) -> None:
    cls: Any = getattr(module, "PreTrainedModel", None)
    original = getattr(cls, "post_init", None)
    if original is None:
        made.append("transformers (not switched: it has no PreTrainedModel.post_init)")
        return
    if getattr(original, "_profkit_sdpa", None) is not None:  # wrapped already: one list
        made.extend(original._profkit_sdpa)
        original._profkit_sdpa = made
        return

    def post_init(self: Any, *args: Any, **kwargs: Any) -> Any:
        done = original(self, *args, **kwargs)
        if getattr(getattr(self, "config", None), "_attn_implementation", None) != "eager":
            return done
        name = type(self).__name__
        try:
            self.set_attn_implementation("sdpa")
        except Exception as exc:  # a model with no SDPA implementation says why
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            post_init._profkit_sdpa.append(f"{name} (not switched: {why})")  # type: ignore[attr-defined]
            return done
        if self.config._attn_implementation == "sdpa":
            post_init._profkit_sdpa.append(name)  # type: ignore[attr-defined]
        else:
            post_init._profkit_sdpa.append(  # type: ignore[attr-defined]
                f"{name} (not switched: it cannot change its attention once made)"
            )
        return done

    post_init.__wrapped__ = original  # type: ignore[attr-defined]
    post_init._profkit_sdpa = made  # type: ignore[attr-defined]
    cls.post_init = post_init


# Each process switch (a Spec field, its flag the field's name) and how it is applied: (torch,
# the process's info) -> None, what it made recorded in the info.
_SWITCHES: dict[str, Callable[[Any, dict[str, Any]], None]] = {
    "tf32": lambda torch, info: _tf32(torch),
    "cudnn_benchmark": lambda torch, info: setattr(torch.backends.cudnn, "benchmark", True),
    "fused_optimizer": lambda torch, info: info.update(fused_optimizers=fuse_optimizers(torch)),
    "cudnn_attention": lambda torch, info: info.update(
        attention_backends=cudnn_attention_first(torch)
    ),
    "sdpa_attention": lambda torch, info: info.update(sdpa_models=sdpa_attention()),
}


def fuse_optimizers(torch: Any) -> list[str]:
    """Make every fusable optimizer created from now on with ``fused=True`` where its parameters
    are all floating-point CUDA tensors and the caller gave neither ``fused`` nor ``foreach``.
    Returns the list it appends each optimizer's class name to (``"AdamW"`` fused, or
    ``"AdamW (not fused: why)"``), as they are made."""
    made: list[str] = []
    for name in FUSABLE_OPTIMIZERS:
        cls = getattr(torch.optim, name, None)
        if cls is None or "fused" not in inspect.signature(cls.__init__).parameters:
            continue
        _wrap_init(torch, cls, made)
    return made


def _wrap_init(torch: Any, cls: Any, made: list[str]) -> None:
    original = cls.__init__

    def init(self: Any, params: Any, *args: Any, **kwargs: Any) -> None:
        if (
            type(self) is not cls
            or kwargs.get("fused") is not None
            or kwargs.get("foreach") is not None
        ):
            if type(self) is cls and kwargs.get("fused") is None:
                made.append(f"{cls.__name__} (not fused: it chose foreach={kwargs['foreach']})")
            original(self, params, *args, **kwargs)
            return
        params = list(params)
        tensors = [
            t
            for group in params
            for t in (
                group.get("params", ())
                if isinstance(group, dict)
                else (group,)
                if isinstance(group, torch.Tensor)
                else ()
            )
        ]
        why = (
            "no parameters"
            if not tensors
            else "parameters outside the GPU"
            if not all(t.is_cuda for t in tensors)
            else "non-floating-point parameters"
            if not all(t.is_floating_point() for t in tensors)
            else ""
        )
        if why or kwargs.get("differentiable"):
            made.append(f"{cls.__name__} (not fused: {why or 'differentiable'})")
        else:
            kwargs["fused"] = True
            made.append(cls.__name__)
        original(self, params, *args, **kwargs)

    init.__wrapped__ = original  # type: ignore[attr-defined]
    cls.__init__ = init


class ModelFixes:
    """A program's model found as it is first called, the model fixes applied to it, and its
    output on its first call kept (see the module docstring).

    Until the model is found, ``nn.Module.__call__`` is wrapped: the first module with
    parameters called outside any other module is the model, and the wrapper is removed. From
    then on the model's calls go through :meth:`_call`, put in the slot ``nn.Module.compile()``
    fills (``_compiled_call_impl``, which ``Module.__call__`` calls instead of ``_call_impl``):
    its inputs laid out channels-last, the call under autocast, compiled where asked, all
    outside any compiled region. On that first call the model is also run once more, before
    it, the fixed way, in eval mode without gradients, the random state forked: its output is
    what a trial compares with the baseline's, the same weights on the same inputs in every
    trial, before training has changed them (steps of training amplify any difference, and
    dropout draws differ in compiled code), and nothing of the program's run changes."""

    def __init__(self, torch: Any, fixes: list[str], device: str):
        self.torch = torch
        self.fixes = [f for f in fixes if f in MODEL_FIXES]
        self.device = device
        self.model: Any = None
        self.model_name: str | None = None
        self.output: Any = None
        self.applied: list[str] = []
        self._local = threading.local()
        self._inner: Any = None
        self._undo: Any = None

    def install(self) -> None:
        import os

        torch, fixes, pid = self.torch, self, os.getpid()
        module_cls = torch.nn.Module
        original = module_cls.__call__
        local = self._local

        def call(module: Any, *args: Any, **kwargs: Any) -> Any:
            if fixes.model is not None or os.getpid() != pid or torch.compiler.is_compiling():
                return original(module, *args, **kwargs)
            depth = getattr(local, "depth", 0)
            if not depth and next(module.parameters(), None) is not None:
                fixes._adopt(module)
                return fixes._first(*args, **kwargs)
            local.depth = depth + 1
            try:
                return original(module, *args, **kwargs)
            finally:
                local.depth = depth

        module_cls.__call__ = call
        self._undo = lambda: setattr(module_cls, "__call__", original)

    def uninstall(self) -> None:
        if self._undo is not None:
            self._undo()
            self._undo = None

    def _adopt(self, module: Any) -> None:
        torch = self.torch
        self.uninstall()
        self.model, self.model_name = module, type(module).__name__
        inner = getattr(module, "_compiled_call_impl", None) or module._call_impl
        if "channels_last" in self.fixes:
            module.to(memory_format=torch.channels_last)
            self.applied.append("channels_last")
        if "amp" in self.fixes:
            self.applied.append("amp")
        for fix, mode in (("compile", "default"), ("compile_reduce_overhead", "reduce-overhead")):
            if fix in self.fixes:
                # Its forward compiled, its call left eager: the hooks around a call (the step
                # clock's, which finds a program's steps by its model's calls) run outside the
                # compiled code, where they are seen (inside it they are traced away).
                module.forward = torch.compile(module.forward, mode=mode)
                self.applied.append(fix)
        self._inner = inner
        module._compiled_call_impl = self._call

    def _first(self, *args: Any, **kwargs: Any) -> Any:
        """The model's first call: its output kept from a run of it in eval mode first."""
        torch, model = self.torch, self.model
        modes = [(m, m.training) for m in model.modules()]
        cuda = self.device == "cuda" and torch.cuda.is_available()
        devices = [torch.cuda.current_device()] if cuda else []
        try:
            REPLAY.on = True  # not one of the program's calls: its step clock does not count it
            with torch.random.fork_rng(devices=devices), torch.no_grad():
                model.eval()
                found = first_tensor(self._call(*args, **kwargs), torch)
            if found is not None:
                self.output = found.detach().to("cpu", torch.float32).clone()
        finally:
            REPLAY.on = False
            for m, training in modes:
                m.training = training
        return self._call(*args, **kwargs)

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        torch = self.torch
        if "channels_last" in self.fixes:
            args = tuple(_channels_last(a, torch) for a in args)
            kwargs = {k: _channels_last(v, torch) for k, v in kwargs.items()}
        if "amp" in self.fixes:
            with torch.autocast(self.device, dtype=torch.bfloat16):
                output = self._inner(*args, **kwargs)
            return _as_float(output, torch)
        return self._inner(*args, **kwargs)


def _as_float(output: Any, torch: Any) -> Any:
    """The model's bf16 outputs made fp32 again, as its caller had them: the code around the
    model (a loss such as binary_cross_entropy, which autocast would have run in fp32, a
    comparison with fp32 labels) runs outside the autocast profkit put around the model only."""
    from torch.utils import _pytree

    def cast(t: Any) -> Any:
        return t.float() if t.dtype == torch.bfloat16 else t

    try:
        return _pytree.tree_map_only(torch.Tensor, cast, output)
    except Exception:  # a structure pytree cannot take apart: as it is
        return output


def _channels_last(t: Any, torch: Any) -> Any:
    if isinstance(t, torch.Tensor) and t.dim() == 4 and t.is_floating_point():
        return t.contiguous(memory_format=torch.channels_last)
    return t


def first_tensor(value: object, torch: Any) -> Any:
    """A model's output tensor: itself, or the first tensor in a tuple, list, dict or an object
    with fields (Hugging Face's ModelOutput is a dict), logits first as models return them; None
    if it holds none."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, dict) and isinstance(value.get("logits"), torch.Tensor):
        return value["logits"]
    items: Any = (
        value.values()
        if isinstance(value, dict)
        else value
        if isinstance(value, (list, tuple))
        else ()
    )
    for item in items:
        found = first_tensor(item, torch)
        if found is not None:
            return found
    return None
