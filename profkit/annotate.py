"""Attribution ranges around every operator of a model's measured iterations: which module,
operator and shapes launched each kernel.

:class:`Annotator` is entered around the measured iterations by the harness (eager and
TorchScript models; a compiled model's kernels are traced by :func:`compiled_kernels`
instead). While it is active:

* global module hooks keep the stack of modules being run, named by their path from the
  outermost one (``layers.3.mlp.down_proj``, ``""`` for the model itself), and record which
  autograd sequence numbers each module's forward created;
* a ``TorchDispatchMode`` wraps each operator call that reaches the dispatcher below
  autograd (``aten::convolution``, ``aten::addmm``, ``aten::convolution_backward``; the
  kernels a call launches are in its range) in one range named by
  :func:`profkit.nvtx_ranges.op_range`: the operator, the phase, the module, its input
  shapes and dtypes. In the backward pass (autograd's own thread) the module is the one whose
  forward created the autograd node being run (its sequence number), or for a gradient
  accumulation the module owning the parameter;
* optimizer step hooks mark an optimizer's operators (``opt``, module ``(optimizer)``).

The ranges are NVTX push/pop ranges (ncu, nsys), ``record_function`` ranges (torch.profiler),
or intervals on CUPTI's clock (ncu's per-function plan, whose launches CUPTI times: see
:class:`IntervalLog`). Imported by the harness inside the profiled process only.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .nvtx_ranges import op_range

if TYPE_CHECKING:
    from .records import CompiledKernel

OPTIMIZER = "(optimizer)"
# The module of an operator run outside every module (a loss written as a function, a
# GradScaler's checks), and of its backward: a fact, where None would mean "not known".
OUTSIDE = "(outside modules)"
# Operators that launch no kernel (allocation, detaching): no range, the call's cost only. Not
# views in general: ``aten::to``, ``reshape`` and ``contiguous`` may alias (``func.is_view``) or
# copy, and are seen before they decide.
_NO_KERNEL = frozenset(
    {"aten::empty", "aten::empty_strided", "aten::detach", "aten::lift_fresh", "aten::alias"}
)


def _dtype_name(dtype: Any) -> str:
    """A torch dtype's name as the kernel table writes input types: ``float16``."""
    return str(dtype).removeprefix("torch.")


def _shape_of(value: Any, torch: Any, shapes: list[str], dtypes: list[str]) -> None:
    """Append the shape and dtype of every tensor in ``value`` (tensors, lists of them: cat's)."""
    if isinstance(value, torch.Tensor):
        shapes.append("[" + ",".join(map(str, value.shape)) + "]")
        dtypes.append(_dtype_name(value.dtype))
    elif isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, (torch.Tensor, list, tuple)):
                _shape_of(v, torch, shapes, dtypes)


class IntervalLog:
    """Operator ranges as (thread, start, end, name) on a clock (CUPTI's, for the per-function
    ncu plan, whose launches CUPTI records with their thread and time): the NVTX ranges are
    pushed too, for ncu's profiled launches."""

    def __init__(
        self, clock: Callable[[], int], push: Callable[[str], Any], pop: Callable[[], Any]
    ):
        self.clock, self._push, self._pop = clock, push, pop
        self.names: dict[str, int] = {}
        self.intervals: list[tuple[int, int, int, int]] = []  # thread, start, end, name index
        self._open = threading.local()

    def push(self, name: str) -> None:
        self._push(name)
        # CUPTI names a thread by its pthread id's low 32 bits
        stack = self._open.__dict__.setdefault("stack", [])
        stack.append((name, self.clock()))

    def pop(self) -> None:
        end = self.clock()
        self._pop()
        name, start = self._open.stack.pop()
        index = self.names.setdefault(name, len(self.names))
        self.intervals.append((threading.get_ident() & 0xFFFFFFFF, start, end, index))

    def to_json(self) -> dict[str, Any]:
        return {"names": list(self.names), "intervals": self.intervals}


class Annotator:
    """``with Annotator(push, pop):`` every operator call in the block is in a range (see the
    module docstring). ``push(name)``/``pop()`` open and close one on the calling thread."""

    def __init__(
        self, push: Callable[[str], Any], pop: Callable[[], Any], optimizer_hooks: bool = True
    ):
        import torch

        self.torch = torch
        # False: the caller forwards optimizer steps to _opt_pre/_opt_post itself (a program's
        # step clock, whose window opens and closes inside an optimizer's step hooks, where
        # registering or removing one would change the hooks torch is iterating).
        self.optimizer_hooks = optimizer_hooks
        self.push, self.pop = push, pop
        self.paths: dict[int, tuple[str, str]] = {}  # id(module) -> (path, class name)
        self.param_owner: dict[int, tuple[str, str]] = {}  # id(parameter) -> its module's
        self.seq_owner: dict[int, tuple[str, str]] = {}  # autograd sequence nr -> module
        self.roots: list[str] = []
        self._local = threading.local()
        self._handles: list[Any] = []
        self._mode: Any = None

    # ------------------------------------------------------------------ modules
    def _stack(self) -> list[Any]:
        stack: list[Any] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _name(self, module: Any, parent: Any | None) -> tuple[str, str]:
        known = self.paths.get(id(module))
        if known is not None:
            return known
        if parent is None:
            # The first module run outside any other is the model: every module under it is
            # named at once, by its path from it (a ModuleList's layers run with the list's
            # owner as their caller, so the call stack alone would not name them). Another
            # top-level module (a loss module) is named by its class.
            kind = type(module).__name__
            root = "" if not self.roots else f"({kind})"
            self.roots.append(root)
            for name, sub in module.named_modules(remove_duplicate=False):
                self._register(sub, f"{root}.{name}" if root and name else (name or root))
            return self.paths[id(module)]
        # A module outside the model's tree (made or held elsewhere): under its caller.
        base = self.paths[id(parent)][0]
        return self._register(
            module, f"{base}.?{type(module).__name__}" if base else f"?{type(module).__name__}"
        )

    def _register(self, module: Any, path: str) -> tuple[str, str]:
        if id(module) not in self.paths:
            self.paths[id(module)] = (path, type(module).__name__)
            for p in module._parameters.values():
                if p is not None:
                    self.param_owner.setdefault(id(p), self.paths[id(module)])
        return self.paths[id(module)]

    def _pre(self, module: Any, args: Any) -> None:
        stack = self._stack()
        self._name(module, stack[-1][0] if stack else None)
        stack.append((module, self.torch._C._autograd._get_sequence_nr()))

    def _post(self, module: Any, args: Any, output: Any) -> None:
        stack = self._stack()
        if not stack or stack[-1][0] is not module:
            return
        _, first = stack.pop()
        owner = self.paths[id(module)]
        # Inner modules end first and claim their nodes; this one takes the rest.
        for seq in range(first, self.torch._C._autograd._get_sequence_nr()):
            self.seq_owner.setdefault(seq, owner)

    def _opt_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._local.optimizer = getattr(self._local, "optimizer", 0) + 1

    def _opt_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._local.optimizer = max(0, getattr(self._local, "optimizer", 1) - 1)

    # ------------------------------------------------------------------ operators
    def where(self) -> tuple[str, str | None, str | None]:
        """(phase, module path, module class) of an operator called now on this thread."""
        node = self.torch._C._current_autograd_node()
        if node is not None:
            owner = self.seq_owner.get(node._sequence_nr())
            if owner is None:
                variable = getattr(node, "variable", None)  # AccumulateGrad: the parameter's module
                owner = self.param_owner.get(id(variable)) if variable is not None else None
            return ("bwd", *owner) if owner else ("bwd", OUTSIDE, None)
        if getattr(self._local, "optimizer", 0):
            return "opt", OPTIMIZER, None
        stack = self._stack()
        if stack:
            return ("fwd", *self.paths[id(stack[-1][0])])
        return "fwd", OUTSIDE, None

    def label(self, func: Any, args: Any, kwargs: Any) -> str:
        phase, module, kind = self.where()
        shapes: list[str] = []
        dtypes: list[str] = []
        _shape_of(args, self.torch, shapes, dtypes)
        if kwargs:
            _shape_of(list(kwargs.values()), self.torch, shapes, dtypes)
        if not dtypes and "device" in kwargs:
            dtypes = self._made(func, args, kwargs)
        return op_range(func._schema.name, phase, module, kind, ";".join(shapes), ",".join(dtypes))

    def _made(self, func: Any, args: Any, kwargs: dict[str, Any]) -> list[str]:
        """The dtype a factory (``arange``, ``full``, ``zeros``: no tensor input) makes, the type
        its kernels work in: the one asked for; else, for the common factories, the one
        PyTorch's documented rule gives (``VALUE_TYPED_FACTORIES`` infer it from their values:
        ``arange(10)`` int64, ``full(s, 1.5)`` the default float; ``randint`` int64; the others
        the default float); for any other, the same call on the meta device says it. (Meta
        kernels load on first use, 1.4 s on a CPU machine: a transformer's measured iteration
        under attribution took 1.8 s longer for it.)"""
        torch = self.torch
        dtype = kwargs.get("dtype")
        if isinstance(dtype, torch.dtype):
            return [_dtype_name(dtype)]
        name = func._schema.name
        if name in VALUE_TYPED_FACTORIES:
            values = [
                a
                for a in [*list(args)[VALUE_TYPED_FACTORIES[name] :], kwargs.get("fill_value")]
                if isinstance(a, (bool, int, float, complex))
            ]
            if name != "aten::full":  # arange(True) counts to 1: int64
                values = [int(v) if isinstance(v, bool) else v for v in values]
            # as torch.tensor infers a type from Python numbers: arange's and full's rule
            if values:
                return [_dtype_name(torch.tensor(values).dtype)]
        elif name in INT64_FACTORIES:
            return ["int64"]
        elif name in DEFAULT_FLOAT_FACTORIES:
            return [_dtype_name(torch.get_default_dtype())]
        try:
            made = func(*args, **{**kwargs, "device": "meta", "pin_memory": False})
        except Exception:  # an operator with no meta kernel: its types stay unknown
            return []
        return [_dtype_name(made.dtype)] if isinstance(made, self.torch.Tensor) else []

    def __enter__(self) -> Annotator:
        from torch.utils._python_dispatch import TorchDispatchMode

        annotator = self

        class _Mode(TorchDispatchMode):  # type: ignore[misc]  # torch's class is untyped
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                # torch wraps a mode's __torch_dispatch__ in torch._dynamo.disable (about 10 us
                # a call) for modes that call torch.compile inside it; this one never does.
                return False

            def __torch_dispatch__(
                self, func: Any, types: Any, args: Any = (), kwargs: Any = None
            ) -> Any:
                kwargs = kwargs or {}
                if func._schema.name in _NO_KERNEL or func.namespace == "profiler":
                    return func(*args, **kwargs)
                annotator.push(annotator.label(func, args, kwargs))
                try:
                    return func(*args, **kwargs)
                finally:
                    annotator.pop()

        mod = self.torch.nn.modules.module
        import torch.optim.optimizer as optim

        self._handles = [
            mod.register_module_forward_pre_hook(self._pre),
            mod.register_module_forward_hook(self._post, always_call=True),
        ]
        if self.optimizer_hooks:
            self._handles += [
                optim.register_optimizer_step_pre_hook(self._opt_pre),
                optim.register_optimizer_step_post_hook(self._opt_post),
            ]
        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
        for h in self._handles:
            h.remove()
        self._handles = []


def nvtx_backend() -> tuple[Callable[[str], Any], Callable[[], Any]]:
    """NVTX push/pop in the default domain (ncu, nsys): torch's binding, the cheapest."""
    import torch

    return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop


def record_function_backend() -> tuple[Callable[[str], Any], Callable[[], Any]]:
    """record_function ranges (torch.profiler), as a push and a pop on the calling thread."""
    import torch

    local = threading.local()
    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit

    def push(name: str) -> None:
        local.__dict__.setdefault("open", []).append(enter(name, None))

    def pop() -> None:
        leave._RecordFunction(local.open.pop())

    return push, pop


# ------------------------------------------------------------------------------ torch.compile
def output_code_files() -> list[str]:
    """The files of Inductor's output code loaded in this process so far."""
    return [
        path
        for module in _output_code_modules()
        if isinstance(path := getattr(module, "__file__", None), str)
    ]


def _output_code_modules() -> list[Any]:
    """The Python modules of Inductor's output code loaded in this process so far."""
    import sys

    codecache = sys.modules.get("torch._inductor.codecache")
    if codecache is None:
        return []
    cache = codecache.PyCodeCache
    return list(getattr(cache, "modules", [])) + list(
        getattr(cache, "modules_no_attr", {}).values()
    )


class _OpCall:
    """An operator reached through a compiled module's globals (``extern_kernels.mm``,
    ``torch.ops.aten._scaled_dot_product_cudnn_attention.default``): called, it runs in a range."""

    def __init__(self, target: Any, op: str, tracer: CompiledTracer):
        self._target, self._op, self._tracer = target, op, tracer

    def __getattr__(self, name: str) -> Any:  # an overload (``.default``)
        value = getattr(self._target, name)
        return _OpCall(value, self._op, self._tracer) if callable(value) else value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tracer.call(self._op, self._target, args, kwargs)


class _Namespace:
    """``extern_kernels``, ``torch.ops`` or an operator namespace (``aten``) whose operators run
    in ranges; ``torch`` itself, of which only ``ops`` is followed."""

    def __init__(
        self, target: Any, tracer: CompiledTracer, namespace: str | None, torch_module: bool = False
    ):
        self._target, self._tracer, self._ns, self._torch = target, tracer, namespace, torch_module

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if self._torch:
            return _Namespace(value, self._tracer, None) if name == "ops" else value
        if self._ns is None:  # torch.ops.<namespace>
            return _Namespace(value, self._tracer, name)
        if (
            not callable(value)
            or f"{self._ns}::{name}" in _NO_KERNEL
            or self._ns in ("inductor", "profiler")
        ):
            return value
        return _OpCall(value, f"{self._ns}::{name}", self._tracer)


class CompiledTracer:
    """``with CompiledTracer(push, pop):`` the ATen operators a compiled model's output code
    calls itself (its extern kernels, ``extern_kernels.mm``, and fallbacks such as cuDNN's
    attention) each run in an operator range with their input shapes and dtypes, forward or
    backward; its Triton kernels are known from the code (:func:`compiled_kernels`).

    The output code's module globals (``extern_kernels``, ``torch``, ``aten``) are swapped for
    stand-ins while the block runs: nothing Dynamo guards on changes (a dispatch mode would
    change every input tensor's dispatch keys and make it compile again), and Inductor's own
    Triton launches pay nothing. No module is known: a compiled graph has no module calls."""

    _GLOBALS = ("extern_kernels", "torch", "aten")

    def __init__(self, push: Callable[[str], Any], pop: Callable[[], Any]):
        import torch

        self.torch = torch
        self.push, self.pop = push, pop
        self._saved: list[tuple[dict[str, Any], str, Any]] = []

    def call(self, op: str, target: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        phase = "bwd" if self.torch._C._current_autograd_node() is not None else "fwd"
        shapes: list[str] = []
        dtypes: list[str] = []
        _shape_of(args, self.torch, shapes, dtypes)
        inputs = [v for k, v in kwargs.items() if k != "out"]
        if inputs:
            _shape_of(inputs, self.torch, shapes, dtypes)
        self.push(op_range(op, phase, None, None, ";".join(shapes), ",".join(dtypes)))
        try:
            return target(*args, **kwargs)
        finally:
            self.pop()

    def __enter__(self) -> CompiledTracer:
        for module in _output_code_modules():
            g = module.__dict__
            if "call" not in g:
                continue
            for name in self._GLOBALS:
                value = g.get(name)
                if value is None or isinstance(value, _Namespace):
                    continue
                self._saved.append((g, name, value))
                torch_module = name == "torch"  # extern_kernels' functions are ATen operators
                g[name] = _Namespace(value, self, None if torch_module else "aten", torch_module)
        return self

    def __exit__(self, *exc: Any) -> None:
        for g, name, value in reversed(self._saved):
            g[name] = value
        self._saved = []


# Factories whose type, where none is asked for, comes from their values (the first value's
# position among the arguments: ``arange(end)``, ``arange(start, end, step)``, ``full(size,
# fill_value)``), those that make int64, and those that make the default float type.
VALUE_TYPED_FACTORIES = {"aten::arange": 0, "aten::range": 0, "aten::full": 1}
INT64_FACTORIES = {"aten::randint", "aten::randperm"}
DEFAULT_FLOAT_FACTORIES = {
    "aten::zeros",
    "aten::ones",
    "aten::empty",
    "aten::empty_strided",
    "aten::rand",
    "aten::randn",
    "aten::eye",
    "aten::scalar_tensor",
}

_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.triton\('(?P<name>\w+)'", re.M)
_ORIGINAL_ATEN = re.compile(r"^# .*Original ATen: \[(?P<ops>[^\]]*)\]", re.M)
_SIGNATURE = re.compile(r"'signature': \{(?P<sig>[^}]*)\}")
_POINTER = re.compile(r"'(?P<arg>\w+)': '\*(?P<t>\w+)'")
# Triton's pointer element types -> torch dtype names.
TRITON_TYPES = {
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "fp64": "float64",
    "i64": "int64",
    "i32": "int32",
    "i16": "int16",
    "i8": "int8",
    "u8": "uint8",
    "i1": "bool",
    "fp8e4nv": "float8_e4m3fn",
    "fp8e5": "float8_e5m2",
    "fp8e4b8": "float8_e4m3fnuz",
    "fp8e5b16": "float8_e5m2fnuz",
}


def _kernel_defs(source: str) -> Iterator[tuple[re.Match[str], int, int]]:
    """Each Triton kernel defined in an output code file: its definition's match, where the
    one before it ended (0 for the first), and where its section ends (the next definition, or
    the file's end)."""
    defs = list(_KERNEL_DEF.finditer(source))
    for i, d in enumerate(defs):
        yield (
            d,
            defs[i - 1].end() if i else 0,
            defs[i + 1].start() if i + 1 < len(defs) else len(source),
        )


def kernels_in_output_code(source: str) -> dict[str, CompiledKernel]:
    """The Triton kernels defined in one of Inductor's output code files: for each, the ATen
    operators its comment says it fused and the element types of its pointer arguments (its
    compiled signature; inputs and outputs alike, outputs last)."""
    found: dict[str, CompiledKernel] = {}
    for d, after_previous, end in _kernel_defs(source):
        before = source[after_previous : d.start()]
        body = source[d.end() : end]
        aten = _ORIGINAL_ATEN.findall(before)
        ops = (
            list(
                dict.fromkeys(
                    o.strip().replace(".", "::", 1) for o in aten[-1].split(",") if o.strip()
                )
            )
            if aten
            else []
        )
        sig = _SIGNATURE.search(body)
        types = (
            [
                TRITON_TYPES.get(m.group("t"), m.group("t"))
                for m in _POINTER.finditer(sig.group("sig"))
            ]
            if sig
            else []
        )
        found[d.group("name")] = {"ops": ops, "input_types": ",".join(types)}
    return found


def compiled_kernels() -> dict[str, CompiledKernel]:
    """Every Triton kernel of the output code torch.compile loaded in this process so far."""
    found: dict[str, CompiledKernel] = {}
    for source in _output_code_sources():
        found.update(kernels_in_output_code(source))
    return found


def generated_kernel_digests() -> dict[str, str]:
    """Per Triton kernel torch.compile generated in this process so far, a digest of its
    source (its definition in the output code: the kernel, its launch heuristics and
    Inductor's metadata). A generated kernel's name does not fix its code (the same name
    comes back in other models): ncu's counters kept across runs are keyed by this too."""
    found: dict[str, str] = {}
    for source in _output_code_sources():
        for d, _, end in _kernel_defs(source):
            found[d.group("name")] = hashlib.sha256(source[d.start() : end].encode()).hexdigest()[
                :20
            ]
    return found


def _output_code_sources() -> Iterator[str]:
    for module in _output_code_modules():
        path = getattr(module, "__file__", None)
        if not path:
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                yield f.read()
        except OSError:
            continue
