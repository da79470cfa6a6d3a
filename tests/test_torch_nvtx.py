"""The NVTX ranges PyTorch's own annotation writes (``emit_nvtx``, nsys ``--pytorch=autograd-nvtx`` /
``autograd-shapes-nvtx``) read as a name and input shapes (issue 36, item 5), on the names of
tests/data/nsys/autograd_shapes.sqlite.gz (20 steps of tests/data/programs/own/amp_train.py under
``nsys profile --pytorch=autograd-shapes-nvtx`` on the H100)."""

from __future__ import annotations

import gzip
import sqlite3

import pytest

from profkit.nvtx_ranges import OpLabel, op_range
from profkit.parse.ncu_common import nvtx_columns
from profkit.parse.ranges import OF_RUN, OWN_OP, TORCH_OP, attribute_row, read_range
from profkit.parse.schema import kernel_row
from profkit.parse.torch_nvtx import read_torch_range

from .conftest import DATA

SHAPES = DATA / "nsys" / "autograd_shapes.sqlite.gz"

# Names as the capture holds them: (range name, name, shapes, an operator's).
REAL = [
    (
        "aten::convolution_backward, op_id = 471, sizes = [[16, 16, 32, 32], [16, 3, 32, 32], [16, 3, 3, 3], [], [], [], "
        "[], [], [], [], []], input_op_ids = [(455,0), (251,0), (247,0), (0,-1), (0,-1), (0,-1), (0,-1), (0,-1), (0,-1), "
        "(0,-1), (0,-1)]",
        "aten::convolution_backward",
        "[16,16,32,32];[16,3,32,32];[16,3,3,3]",
        True,
    ),
    (
        "aten::addmm, seq = 10, op_id = 294, sizes = [[64], [16, 256], [256, 64], [], []], input_op_ids = [(282,0), "
        "(279,0), (291,0), (0,-1), (0,-1)]",
        "aten::addmm",
        "[64];[16,256];[256,64]",
        True,
    ),
    # A 0-d tensor's sizes are [], as a non-tensor's: left out, as profkit's own ranges leave scalars out.
    (
        "aten::_local_scalar_dense, seq = 0, op_id = 116, sizes = [[]], input_op_ids = [(114,0)]",
        "aten::_local_scalar_dense",
        None,
        True,
    ),
    # A tensor list's tensors, one entry each.
    (
        "aten::_foreach_mul_, op_id = 654, sizes = [[16, 3, 3, 3], [16], [16], [16], [64, 256], [64], [10, 64], [10], "
        "[]], input_op_ids = [(13,0), (14,0), (35,0), (36,0), (43,0), (44,0), (51,0), (52,0), (0,-1)]",
        "aten::_foreach_mul_",
        "[16,3,3,3];[16];[16];[16];[64,256];[64];[10,64];[10]",
        True,
    ),
    # An autograd node (seq: the forward's), the engine's range around it, record_function ranges:
    # names, not operators; the last two have no sizes at all.
    (
        "ReluBackward0, seq = 124, op_id = 3265, sizes = [[16, 16, 32, 32]], input_op_ids = [(3258,0)]",
        "ReluBackward0",
        "[16,16,32,32]",
        False,
    ),
    (
        "autograd::engine::evaluate_function: ReluBackward0, op_id = 3264",
        "autograd::engine::evaluate_function: ReluBackward0",
        None,
        False,
    ),
    (
        "Optimizer.zero_grad#AdamW.zero_grad, op_id = 325",
        "Optimizer.zero_grad#AdamW.zero_grad",
        None,
        False,
    ),
    (
        "torch::autograd::AccumulateGrad, op_id = 5002, sizes = [[10]], input_op_ids = [(4997,0)]",
        "torch::autograd::AccumulateGrad",
        "[10]",
        False,
    ),
]


@pytest.mark.parametrize("text,name,shapes,operator", REAL)
def test_a_real_range_name_reads_as_name_and_shapes(text, name, shapes, operator):
    r = read_torch_range(text)
    assert r is not None and (r.name, r.shapes, r.operator, r.annotated) == (
        name,
        shapes,
        operator,
        True,
    )
    assert r.label == (f"{name} {shapes}" if shapes else name)


@pytest.mark.parametrize(
    "text,name,shapes",
    [
        # --pytorch=autograd-nvtx (emit_nvtx(record_shapes=False)): the same ranges without sizes and
        # input_op_ids (getNvtxStr), as the issue quotes one: the operator, no shapes.
        ("aten::_local_scalar_dense, seq = 25, op_id = 1015", "aten::_local_scalar_dense", None),
        ("aten::cudnn_convolution, op_id = 258", "aten::cudnn_convolution", None),
        # Releases before op_id: name, seq, sizes; and emit_nvtx's documented "stashed seq".
        (
            "aten::addmm, seq = 12, sizes = [[64], [8, 512], [512, 64]]",
            "aten::addmm",
            "[64];[8,512];[512,64]",
        ),
        ("aten::mm, stashed seq = 4", "aten::mm", None),
    ],
)
def test_the_forms_without_shapes_or_op_ids(text, name, shapes):
    r = read_torch_range(text)
    assert r is not None and (r.name, r.shapes, r.operator, r.annotated) == (
        name,
        shapes,
        True,
        True,
    )


def test_other_ranges_are_not_pytorchs():
    # An operator's bare name (old emit_nvtx without shapes; CUB's own ranges look alike): an
    # operator's name, but no annotation.
    assert read_torch_range("aten::empty") == ("aten::empty", None, True, False)
    for text in (
        "profkit@resnet18.fp16.eager.iter0",
        "ProfilerStep#3",
        "cub::DeviceSelect::Flagged",
        "forward, 2",
        "x, seq = a",
        "aten::mm, sizes = [[1], [2]",
        "aten::mm, op_id = 3, input_op_ids = [(1,0)",
    ):
        assert read_torch_range(text) is None, text


def test_every_range_of_the_capture_reads(tmp_path):
    """All 9,259 ranges of the capture are PyTorch's: every one reads, and what profkit shows of
    each holds none of the per-call fields."""
    db = tmp_path / "c.sqlite"
    db.write_bytes(gzip.decompress(SHAPES.read_bytes()))
    texts = [
        t
        for (t,) in sqlite3.connect(db).execute("select text from NVTX_EVENTS where eventType = 59")
    ]
    assert len(texts) == 9259
    read = [read_torch_range(t) for t in texts]
    assert all(r is not None and r.annotated for r in read)
    assert not [
        r.label for r in read if r is not None and (" = " in r.label or "input_op_ids" in r.label)
    ]
    assert {r.name for r in read if r is not None and r.operator} >= {
        "aten::cudnn_convolution",
        "aten::item",
    }


def test_what_a_range_is_to_the_importers():
    addmm = OpLabel("aten::addmm", None, None, None, "[64];[16,256];[256,64]", None)
    assert read_range(REAL[1][0]) == ("aten::addmm [64];[16,256];[256,64]", addmm, TORCH_OP)
    assert read_range(REAL[4][0]) == ("ReluBackward0 [16,16,32,32]", None, OF_RUN)
    assert read_range("aten::empty")[1:] == (
        OpLabel("aten::empty", None, None, None, None, None),
        OF_RUN,
    )
    own = op_range("aten::add_", "fwd", "", "ResNet", "[3]", "int64")
    assert read_range(own)[2] == OWN_OP and read_range("ProfilerStep#3") == (
        "ProfilerStep#3",
        None,
        OF_RUN,
    )


def test_an_ncu_launchs_stack_of_pytorchs_ranges():
    """A kernel's NVTX stack as ncu records it, of this capture's ranges: the run's ranges (the
    autograd node's) by name and shapes, the operator call as attribution only."""
    stack = [
        ("", "autograd::engine::evaluate_function: ReluBackward0, op_id = 3264"),
        (
            "",
            "ReluBackward0, seq = 124, op_id = 3265, sizes = [[16, 16, 32, 32]], input_op_ids = [(3258,0)]",
        ),
        (
            "",
            "aten::threshold_backward, op_id = 3266, sizes = [[16, 16, 32, 32], [16, 16, 32, 32], []], "
            "input_op_ids = [(3258,0), (3254,0), (0,-1)]",
        ),
    ]
    cols = nvtx_columns(stack)
    assert cols["nvtx_range"] == "ReluBackward0 [16,16,32,32]"
    assert (
        cols["nvtx_path"]
        == "autograd::engine::evaluate_function: ReluBackward0/ReluBackward0 [16,16,32,32]"
    )
    assert (cols["op"], cols["shapes"]) == (
        "aten::threshold_backward",
        "[16,16,32,32];[16,16,32,32]",
    )


def test_which_operator_range_a_row_gets():
    row = kernel_row(0, "kernel", "k", "k")
    cub = OpLabel("cub::DeviceRadixSort", None, None, None, None, None)
    call = OpLabel("aten::sort", None, None, None, "[8,1024]", None)
    attribute_row(row, [cub], call)  # PyTorch's operator call over a range merely named like one
    assert (row["op"], row["shapes"]) == ("aten::sort", "[8,1024]")
    own = OpLabel("aten::sort", "forward", "model.head", "Head", "[8,1024]", "float16")
    row = kernel_row(0, "kernel", "k", "k")
    attribute_row(row, [own], call)  # profkit's own says more
    assert (row["op"], row["module"], row["phase"]) == ("aten::sort", "model.head", "forward")
