"""Kernel-name normal forms. Different exports name the same kernel differently (ncu's CSV
simplifies the demangling, its report reader gives the full form, nsys writes ``(bool)1``
template arguments); ``short_name`` is the function's own name, which all of them agree on."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from .formatting import cut_middle


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
_LAUNCHERS = {
    "vectorized_elementwise_kernel",
    "unrolled_elementwise_kernel",
    "elementwise_kernel",
    "reduce_kernel",
}
_WRAPPERS = {
    "void",
    "gpu_kernel_impl_nocast",
    "gpu_kernel_impl",
    "BinaryFunctor",
    "ReduceOp",
    "lambda",
    "operator",
    "array",
    "TensorIteratorBase",
}
_CALLED = re.compile(r"([A-Za-z_]\w*)\s*[<(]")


def _first_argument(text: str) -> str:
    """The first template argument of ``name<...>``: up to its comma or closing '>'."""
    depth, arg = 0, []
    for ch in text[text.find("<") + 1 :]:
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
    text = name[name.find(short) :] if short in name else ""
    if "<" not in text:
        return short
    if short in _GENERIC:
        first = _first_argument(text)
        return f"{short}<{first}>" if first else short
    if short in _LAUNCHERS:
        called = next(
            (m for m in _CALLED.findall(text[text.find("<") + 1 :]) if m not in _WRAPPERS), None
        )
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


# ------------------------------------------------------------------------- labels in a table
# A kernel's template arguments as a person reads them: no namespaces, no casts of numbers
# ("(int)4" as nsys writes it is "4"), a lambda by what it takes ("{lambda(float)#1}" and
# "[lambda(float) (instance 1)]" alike), no "::operator()() const" steps, no spaces before "*"/"&".
_LAMBDA = re.compile(r"\{(lambda\([^(){}]*\))#\d+\}|\[(lambda\([^()\[\]]*\)) \(instance \d+\)\]")
_OPERATOR_CALL = re.compile(r"::operator ?\(\)\(\) const")
_NAMESPACE = re.compile(
    r"(?:\(anonymous namespace\)|<unnamed>|\b[A-Za-z_]\w*)::(?=[A-Za-z_~(<\[{])"
)
_CAST = re.compile(r"\((?:unsigned |signed )?(?:int|long|long long|short|char|bool)\)(?=-?\w)")
_SUFFIX = re.compile(r"\b(\d+)(?:ul|u|l|ll|ull)\b")
_SPACE = re.compile(r"\s+(?=[*&>,)])")
_VOID = re.compile(r"\bvoid (?=[A-Za-z_])")
_EMPTY_LAMBDA = re.compile(r"::lambda\(\)(?=::)")
# A lambda in a function template is that function's body: its template arguments name it
# (``gpu_kernel_impl_nocast<CUDAFunctor_add<float>>::lambda(int)``).
_BODY = re.compile(r"(?<=>)::lambda\([^()]*\)")


def _drop_scope_parameters(text: str) -> str:
    """``f<T>(int, T1)::lambda(int)`` -> ``f<T>::lambda(int)``: a parameter list followed by
    ``::`` is the scope's, not what tells two kernels apart."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "(" and out and (out[-1][-1:].isalnum() or out[-1][-1:] in "_>"):
            depth, j = 0, i
            while j < len(text):
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                if depth == 0:
                    break
                j += 1
            if text.startswith("::", j + 1):
                i = j + 1
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _tidy(text: str) -> str:
    text = _LAMBDA.sub(lambda m: m.group(1) or m.group(2), text)
    text = _EMPTY_LAMBDA.sub("", _OPERATOR_CALL.sub("", text))
    for _ in range(8):  # nested qualifications go one level a pass (before a function's scope is)
        tidier = _NAMESPACE.sub("", text)
        if tidier == text:
            break
        text = tidier
    text = _BODY.sub("", _VOID.sub("", _drop_scope_parameters(text)))
    return _SPACE.sub("", _SUFFIX.sub(r"\1", _CAST.sub("", text))).strip()


def _split_top(text: str) -> list[str]:
    """``text`` split at its commas outside brackets of any kind."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur).strip())
    return parts


def template_arguments(name: str, short: str | None = None) -> list[str]:
    """The template arguments of the kernel function itself (not of its namespace or its
    parameters), each tidied as a person reads it; [] for a plain C name."""
    short = short or short_name(name)
    text = name.replace("(anonymous namespace)::", "")
    at = text.find(short + "<")
    if at < 0:
        return []
    depth, inner = 0, []
    for ch in text[at + len(short) :]:
        if ch == "<":
            depth += 1
            if depth == 1:
                continue
        elif ch == ">":
            depth -= 1
            if depth == 0:
                break
        elif ch == "(" and depth == 0:
            break
        inner.append(ch)
    return [_tidy(a) for a in _split_top("".join(inner))] if inner else []


def _tag(name: str) -> str:
    """A short stable mark of a full name (4 hex digits of its CRC-32), for the rare names that
    no readable part tells apart."""
    import zlib

    return f"{zlib.crc32(name.encode('utf-8', 'surrogatepass')) & 0xFFFF:04x}"


def _with_arguments(group: list[str]) -> dict[str, str]:
    """Names that share a label, each as its function with the template arguments that tell
    it from the others (the ones all share shown as "…")."""
    args = {n: template_arguments(n) for n in group}
    most = max(len(a) for a in args.values())
    differ = [
        i for i in range(most) if len({a[i] if i < len(a) else None for a in args.values()}) > 1
    ]
    out = {}
    for n, a in args.items():
        shown: list[str] = []
        for i, arg in enumerate(a):
            if i in differ:
                shown.append(arg)
            elif not shown or shown[-1] != "…":
                shown.append("…")
        out[n] = f"{short_name(n)}<{', '.join(shown)}>" if a else _tidy(n.removeprefix("void "))
    return out


def _shared(labels: dict[str, str]) -> list[list[str]]:
    """The groups of names that share a label."""
    groups: dict[str, list[str]] = {}
    for n, label in labels.items():
        groups.setdefault(label, []).append(n)
    return [g for g in groups.values() if len(g) > 1]


def _distinct(labels: dict[str, str], grow: list[Any], width: int | None = None) -> dict[str, str]:
    """``labels`` (full name -> label) with every label two names share grown by each of
    ``grow`` in turn (a function of the group of names that share one -> their new labels),
    and last, where even that leaves two alike, marked with ``_tag`` (and, were two marks
    alike, numbered), within ``width``."""

    def mark(group: list[str], by: Any) -> dict[str, str]:
        out = {}
        for i, n in enumerate(group):
            end = f" ~{by(i, n)}"
            out[n] = (
                labels[n]
                if width is None or len(labels[n]) + len(end) <= width
                else cut_middle(labels[n], max(1, width - len(end)))
            ) + end
        return out

    last = [
        lambda group: mark(group, lambda i, n: _tag(n)),
        lambda group: mark(group, lambda i, n: i + 1),
    ]
    for step in [*grow, *last]:
        shared = _shared(labels)
        if not shared:
            break
        for g in shared:
            labels.update(step(g))
    return labels


_WORD_ENDS = "_<>,:() ."


def _cut_apart(labels: dict[str, str], width: int) -> Any:
    """A step of ``_distinct`` for labels cut alike to ``width``: each shows its start, "…",
    then from the word where the group's labels part (after their common start) on, cut at its
    end; a step further on each pass, as the groups that still share a cut narrow."""

    def step(group: list[str]) -> dict[str, str]:
        texts = [labels[n] for n in group]
        full = [full_labels[n] for n in group]
        common = len(_common_prefix(full))
        out = {}
        for n, text in zip(group, full):
            at = common
            # from the start of the word the labels part in ("…tilesize256x64x32_…", not "…ze256…")
            while at > 0 and common - at < 16 and text[at - 1] not in _WORD_ENDS:
                at -= 1
            head = min(at, max(1, (width - 1) // 4))
            if at <= head:  # they part near their start: their start, cut at its end
                out[n] = text if len(text) <= width else text[: width - 1] + "…"
                continue
            rest = width - head - 1
            # the part from there on, cut at its end: what the group shares after it says nothing
            part = text[at:] if len(text) - at <= rest else text[at : at + rest - 1] + "…"
            out[n] = text[:head] + "…" + part
        return out if [out[n] for n in group] != texts else {n: labels[n] for n in group}

    full_labels = dict(labels)
    return step


_WORD = re.compile(r"[^_<>,:() .]*[_<>,:() .]*")


def _words_apart(labels: dict[str, str], width: int) -> Any:
    """A step of ``_distinct`` for labels that part in more than one place (cuDNN's
    ``sm90_xmma_fprop_..._tilesize64x64x32_..._k_on_kernel``): each as its first word and the
    words in which the group's labels differ, word by word, the runs of shared ones as "…"
    (``sm90_…tilesize64x64x32_…on_…``), cut at its end."""

    def step(group: list[str]) -> dict[str, str]:
        words = {n: [w for w in _WORD.findall(labels[n]) if w] for n in group}
        most = max(len(w) for w in words.values())
        differ = [i for i in range(most) if len({tuple(w[i : i + 1]) for w in words.values()}) > 1]
        out = {}
        for n, w in words.items():
            text = w[0] if w else ""
            for i in differ:
                if i < len(w) and i > 0:
                    text += ("" if i - 1 in differ else "…") + w[i]
            if differ and differ[-1] < len(w) - 1:
                text += "…"
            out[n] = text if len(text) <= width else text[: width - 1] + "…"
        return out

    return step


def _common_prefix(texts: list[str]) -> str:
    import os

    return os.path.commonprefix(texts)


def _cut_label(label: str, width: int) -> str:
    """A label within ``width``: a function with template arguments keeps them whole where
    its name can keep 8 characters (``vectorized…<4, CUDAFunctor_add<float>, …>``), since
    they are what tells it from its siblings; anything else cut in the middle."""
    at = label.find("<")
    if len(label) > width and at > 0 and label.endswith(">") and width - (len(label) - at) - 1 >= 8:
        return label[: width - (len(label) - at) - 1] + "…" + label[at:]
    return cut_middle(label, width)


def table_labels(
    names: Iterable[str], width: int | None = None, short: bool = True
) -> dict[str, str]:
    """How a table prints each of ``names`` (kernel names, or operator names with ``short``
    False): the readable label the report shows (``display_name``), and no two distinct names
    printed alike. Where two share a label, each grows by the template arguments that tell it
    apart (``vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, …>``), then by its whole
    tidied name, then by a short stable mark (``~1a2b``). With ``width``, each is cut to it
    (its template arguments kept where they fit, else its start and end), and where two cut
    alike, each shows the part where they differ instead. The one place that makes a table's
    names."""
    distinct = list(dict.fromkeys(names))
    labels = {n: display_name(n) if short else n for n in distinct}
    grow = (
        [_with_arguments, lambda group: {n: _tidy(n.removeprefix("void ")) for n in group}]
        if short
        else []
    )
    labels = _distinct(labels, grow)
    if width is None:
        return labels
    cut = {n: _cut_label(label, width) for n, label in labels.items()}
    if len(set(cut.values())) == len(cut):
        return cut
    apart = _cut_apart(labels, width)
    return _distinct(cut, [apart, _words_apart(labels, width), apart], width)
