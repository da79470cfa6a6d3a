"""The fixes profkit applies inside a profiled (or timed) process, without the workload's or the
script's code knowing: what ``--tf32`` and ``--fused-optimizer`` do in any process, and what
``profkit tune`` tries on a user's program from outside it.

- **Process switches** (:func:`apply_switches`), before anything is built: TF32 for fp32 matmuls
  (``torch.set_float32_matmul_precision("high")``), and optimizers made with ``fused=True``
  (:func:`fuse_optimizers`: Adam, AdamW, SGD and Adagrad made after it, on the GPU, where the
  caller chose neither ``fused`` nor ``foreach``).
- **The model's fixes** (:class:`ModelFixes`, a program's): the program's model is the first
  module with parameters called outside any other module; channels-last (its weights and its
  4-D inputs), bf16 autocast around its calls (no loss scaler needed, so none is added), and
  ``torch.compile`` (its ``compile()``: the calls after the first run compiled) are applied to
  it when it is first called. The first call of it after :meth:`ModelFixes.capture_next` saves
  its output (the first tensor, as fp32 on the CPU): what ``profkit tune`` compares.

torch is the caller's (imported by the process already); nothing here imports it at module level.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

# The optimizers PyTorch has a fused (single-kernel) implementation of, on CUDA.
FUSABLE_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")
# What ModelFixes applies to a program's model (``profkit tune``'s fix ids).
MODEL_FIXES = ("channels_last", "amp", "compile", "compile_reduce_overhead")
# What apply_switches applies to any process (``Spec``'s switches of the same names).
PROCESS_FIXES = ("tf32", "fused_optimizer", "cudnn_benchmark")


def apply_switches(torch: Any, spec: Any, info: dict[str, Any]) -> None:
    """The spec's process switches, before the workload or the script builds anything."""
    if getattr(spec, "tf32", False):
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True
    if getattr(spec, "cudnn_benchmark", False):
        torch.backends.cudnn.benchmark = True
    if getattr(spec, "fused_optimizer", False):
        info["fused_optimizers"] = fuse_optimizers(torch)


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
        if type(self) is not cls or kwargs.get("fused") is not None or kwargs.get("foreach"):
            if type(self) is cls and kwargs.get("fused") is None:
                made.append(f"{cls.__name__} (not fused: it asks for foreach)")
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
    output on the first call after :meth:`capture_next` kept (see the module docstring)."""

    def __init__(self, torch: Any, fixes: list[str], device: str):
        self.torch = torch
        self.fixes = [f for f in fixes if f in MODEL_FIXES]
        self.device = device
        self.model: Any = None
        self.model_name: str | None = None
        self.output: Any = None
        self.applied: list[str] = []
        self._capture = False
        self._local = threading.local()
        self._handles: list[Any] = []
        self._autocast: list[Any] = []

    def install(self) -> None:
        mod = self.torch.nn.modules.module
        self._handles = [
            mod.register_module_forward_pre_hook(self._pre),
            mod.register_module_forward_hook(self._post, always_call=True),
        ]

    def uninstall(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def capture_next(self) -> None:
        """Keep the model's output of its next top-level call."""
        self._capture = True

    # ------------------------------------------------------------------ hooks
    def _pre(self, module: Any, args: Any) -> Any:
        if self.torch.compiler.is_compiling():
            return None
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        if depth:
            return None
        if self.model is None:
            if next(module.parameters(), None) is None:
                return None
            self._adopt(module)
        if module is not self.model:
            return None
        if "amp" in self.fixes:
            dtype = self.torch.bfloat16
            ctx = self.torch.autocast(self.device, dtype=dtype)
            ctx.__enter__()
            self._autocast.append(ctx)
        if "channels_last" in self.fixes:
            return self._channels_last(args)
        return None

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self.torch.compiler.is_compiling():
            return
        self._local.depth = max(0, getattr(self._local, "depth", 1) - 1)
        if module is not self.model or self._local.depth:
            return
        if self._autocast:
            self._autocast.pop().__exit__(None, None, None)
        if self._capture:
            self._capture = False
            found = first_tensor(output, self.torch)
            if found is not None:
                self.output = found.detach().to("cpu", self.torch.float32).clone()

    def _adopt(self, module: Any) -> None:
        self.model, self.model_name = module, type(module).__name__
        torch = self.torch
        if "channels_last" in self.fixes:
            module.to(memory_format=torch.channels_last)
            self.applied.append("channels_last")
        if "amp" in self.fixes:
            self.applied.append("amp")
        for fix, mode in (("compile", "default"), ("compile_reduce_overhead", "reduce-overhead")):
            if fix in self.fixes:
                # Its forward compiled, not the module (``module.compile()``): the hooks here then
                # run around the compiled code, where autocast and the output's capture happen;
                # inside a compiled call they are traced away. Its calls after this one run it.
                module.forward = torch.compile(module.forward, mode=mode)
                self.applied.append(fix)

    def _channels_last(self, args: Any) -> Any:
        torch = self.torch

        def lay(t: Any) -> Any:
            if isinstance(t, torch.Tensor) and t.dim() == 4 and t.is_floating_point():
                return t.contiguous(memory_format=torch.channels_last)
            return t

        return tuple(lay(a) for a in args)


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
