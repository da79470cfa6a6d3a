"""Kernel-name normal forms. Different exports name the same kernel differently (ncu's CSV
simplifies the demangling, its report reader gives the full form, nsys writes ``(bool)1``
template arguments); ``short_name`` is the function's own name, which all of them agree on."""

from __future__ import annotations


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


def display_name(name: str, short: str | None = None) -> str:
    """A readable label for charts and tables: the short name, or for generic ones (cutlass's
    ``Kernel2``) the short name with its first template argument."""
    short = short or short_name(name)
    if short not in _GENERIC:
        return short
    text = name[name.find(short):]
    lt = text.find("<")
    if lt < 0:
        return short
    depth, arg = 0, []
    for ch in text[lt + 1:]:
        if ch == "<":
            depth += 1
        elif ch == ">":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            break
        arg.append(ch)
    first = "".join(arg).strip()
    return f"{short}<{first}>" if first else short
