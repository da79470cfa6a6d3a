"""Kernel-name normal forms. Different exports name the same kernel differently (ncu's CSV
simplifies the demangling, its report reader gives the full form, nsys writes ``(bool)1``
template arguments); ``short_name`` is the function's own name, which all of them agree on."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any


def _strip_bracketed(text: str, open_: str, close: str) -> str:
    out, depth = [], 0
    for ch in text:
        if ch == open_:
            depth += 1
        elif ch == close and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def short_name(name: str) -> str:
    """``void at::native::foo<(int)4, bar>(int, T2)`` -> ``foo``; a plain C name stays as it is."""
    # Parenthesised parts of a qualified name are not parameters.
    text = name.strip().replace("(anonymous namespace)::", "")
    if text.startswith("void "):
        text = text[5:]
    # Parameters first (they may hold templates), then template arguments.
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            cut = i
            break
    text = _strip_bracketed(text[:cut], "<", ">")
    return text.rsplit("::", 1)[-1].strip() or name


# Function names that say nothing alone: the first template argument names the kernel
# (``cutlass::Kernel2<cutlass_80_wmma_tensorop_f16_..._align2>(T1::Params)``).
_GENERIC = {"Kernel", "Kernel2", "kernel", "device_kernel", "kernel_entry"}
# PyTorch's elementwise and reduction launchers: the functor or function they run names them
# (``vectorized_elementwise_kernel<4, at::CUDAFunctor_add<c10::Half>, ...>``).
_LAUNCHERS = {"vectorized_elementwise_kernel", "unrolled_elementwise_kernel", "elementwise_kernel", "reduce_kernel"}
_WRAPPERS = {"void", "gpu_kernel_impl_nocast", "gpu_kernel_impl", "BinaryFunctor", "ReduceOp", "lambda", "operator",
             "array", "TensorIteratorBase"}
_CALLED = re.compile(r"([A-Za-z_]\w*)\s*[<(]")


def _first_argument(text: str) -> str:
    """The first template argument of ``name<...>``: up to its comma or closing '>'."""
    depth, arg = 0, []
    for ch in text[text.find("<") + 1:]:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            break
        arg.append(ch)
    return "".join(arg).strip()


def display_name(name: str, short: str | None = None) -> str:
    """A readable label for charts and tables: the short name; for generic ones (cutlass's
    ``Kernel2``) with their first template argument; for PyTorch's elementwise and reduction
    launchers with the functor they run (``vectorized_elementwise_kernel<CUDAFunctor_add>``)."""
    short = short or short_name(name)
    text = name[name.find(short):] if short in name else ""
    if "<" not in text:
        return short
    if short in _GENERIC:
        first = _first_argument(text)
        return f"{short}<{first}>" if first else short
    if short in _LAUNCHERS:
        called = next((m for m in _CALLED.findall(text[text.find("<") + 1:]) if m not in _WRAPPERS), None)
        return f"{short}<{called}>" if called else short
    return short


@lru_cache(maxsize=1)
def _cxa_demangle() -> Any:
    """The C++ runtime's ``__cxa_demangle`` (libstdc++), or None where it cannot be loaded."""
    import ctypes
    import ctypes.util

    try:
        lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        fn = lib.__cxa_demangle
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    free = ctypes.CDLL(None).free
    free.argtypes = [ctypes.c_void_p]
    return fn, free


@lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """A mangled C++ name (``_Z...``, as CUPTI reports kernels) demangled by the C++ runtime's
    own demangler, the form nsys and torch.profiler show; the name as it is where it is not
    mangled or no demangler can be loaded."""
    if not name.startswith("_Z"):
        return name
    loaded = _cxa_demangle()
    if loaded is None:
        return name
    import ctypes

    fn, free = loaded
    status = ctypes.c_int(-1)
    out = fn(name.encode(errors="replace"), None, None, ctypes.byref(status))
    if not out:
        return name
    try:
        return ctypes.string_at(out).decode(errors="replace") if status.value == 0 else name
    finally:
        free(out)
