"""The NVTX ranges PyTorch's own annotation writes, read back as a name and input shapes.

``torch.autograd.profiler.emit_nvtx()`` (``record_shapes=False`` or ``True``), and nsys's
``--pytorch=autograd-nvtx`` / ``--pytorch=autograd-shapes-nvtx`` which turn it on, push one range
per ``RecordFunction`` (every dispatcher operator, autograd node, ``record_function``), nested like
the calls, and name it (torch/csrc/profiler/util.cpp, ``getNvtxStr``)::

    NAME[, seq = N][, op_id = N][, sizes = [[d, d, ...], [], ...]][, input_op_ids = [(op,out), ...]]

``seq`` is the autograd sequence number, ``op_id`` a number of its own for every call, ``sizes``
(with shapes recorded) one entry per input, ``[]`` for one that is not a tensor, and
``input_op_ids`` the op_ids that made each input. Older releases wrote ``NAME, seq = N, sizes =
[...]`` or the bare name (``emit_nvtx``'s own documentation also names a ``stashed seq``).
Since op_id and input_op_ids differ on every call, the raw names never repeat: what stays is
the name, an operator where it is one (``aten::conv2d``: ``namespace::name``), and the tensor
inputs' shapes in the kernel table's form (``[8,3,224,224];[64,3,7,7]``, the rest left out).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

# The numbered fields getNvtxStr may put after the name: left out of what a range says (every
# call has its own op_id; seq counts autograd nodes across the steps).
_NUMBERED = re.compile(r", (?:stashed )?(?:seq|op_id) = \d+")
_SIZES = ", sizes = "
_INPUT_OP_IDS = ", input_op_ids = ["
_SIZES_VALUE = re.compile(r"\[(?:\[[\d, ]*\](?:, )?)*\]")
_SHAPE = re.compile(r"\[([\d, ]*)\]")
# A dispatcher operator's name (aten::conv2d, torchvision::nms, prim::Constant): the kernel
# table's ``op``. Autograd nodes (ReluBackward0), the engine's own ranges (``autograd::engine::
# evaluate_function: ReluBackward0``) and record_function ranges are names, not operators.
_OPERATOR = re.compile(r"[A-Za-z_][\w.]*::[\w.]+")


class TorchRange(NamedTuple):
    """What a range PyTorch's annotation wrote says."""

    name: str  # the RecordFunction's name: aten::conv2d, ReluBackward0, Optimizer.step#AdamW.step
    # its tensor inputs' shapes, ``[8,3,224,224];[64,3,7,7]`` (None: none recorded)
    shapes: str | None
    operator: bool  # the name is a dispatcher operator's (the kernel table's ``op``)
    annotated: bool  # the range has PyTorch's fields (else a bare operator's name)

    @property
    def label(self) -> str:
        """The range as profkit shows it: the name, then the shapes (``aten::addmm [8,512];[512,64]``)."""
        return f"{self.name} {self.shapes}" if self.shapes else self.name


def read_torch_range(text: str) -> TorchRange | None:
    """The name and shapes of a range PyTorch's annotation wrote (see above), or None for a
    range it did not write: a name with none of its fields that is no operator's either.

    A capture holds several such ranges a kernel, none named twice: the per-call fields are
    cut off first, and what is left (name and sizes), which repeats from step to step, is read
    once (``_name_and_sizes``)."""
    end = text.find(_INPUT_OP_IDS)
    if end < 0:
        rest, numbered = _NUMBERED.subn("", text)
    elif text.endswith("]"):
        rest, numbered = _NUMBERED.subn("", text[:end])
        numbered += 1
    else:
        return None
    return _name_and_sizes(rest, numbered > 0)


@lru_cache(maxsize=1 << 16)
def _name_and_sizes(text: str, annotated: bool) -> TorchRange | None:
    """``NAME[, sizes = [...]]`` read (``annotated``: the range had other fields of PyTorch's)."""
    at = text.find(_SIZES)
    if at > 0:
        sizes = text[at + len(_SIZES) :]
        if not _SIZES_VALUE.fullmatch(sizes):
            return None
        text = text[:at]
        shapes = (
            ";".join(f"[{s.replace(' ', '')}]" for s in _SHAPE.findall(sizes[1:-1]) if s) or None
        )
    elif not annotated:
        return TorchRange(text, None, True, False) if _OPERATOR.fullmatch(text) else None
    else:
        shapes = None
    return TorchRange(text, shapes, _OPERATOR.fullmatch(text) is not None, True)
