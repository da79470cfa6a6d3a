"""profkit.annotate in a process of its own making, on the CPU: what the operator ranges say
for factories (no tensor input) and for the operators a compiled model's code calls itself."""

from __future__ import annotations

import pytest

from profkit.nvtx_ranges import op_label

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


def labels(names: list[str]) -> list:
    return [op_label(n) for n in names]


def test_a_factorys_range_carries_the_type_it_makes():
    """arange over ints makes int64, full with a float the default float, ones in a dtype that
    dtype: their kernels work in it, and no tensor input says so."""
    from profkit.annotate import Annotator

    names: list[str] = []
    with Annotator(names.append, lambda: None):
        torch.arange(10)
        torch.full((2,), 1.5)
        torch.ones(2, dtype=torch.float16)
        torch.arange(3) + torch.ones(3)
    made = [(x.op, x.input_types) for x in labels(names)]
    assert made == [
        ("aten::arange", "int64"),
        ("aten::full", "float32"),
        ("aten::ones", "float16"),
        ("aten::arange", "int64"),
        ("aten::ones", "float32"),
        ("aten::add", "int64,float32"),
    ]


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(64, 192)
        self.out = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(2, 16, 3, 4, 16).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.out(torch.relu(y.transpose(1, 2).reshape(2, 16, 64)))


def test_a_compiled_models_own_operator_calls_get_ranges_without_compiling_again():
    """The extern GEMMs and the attention fallback Inductor's code calls, forward and backward,
    each in a range with their shapes and dtypes; Dynamo compiles nothing more, and the code's
    globals are its own again after the block."""
    import torch._dynamo

    from profkit.annotate import CompiledTracer, _output_code_modules

    model = torch.compile(_Block())
    x = torch.randn(2, 16, 64, requires_grad=True)
    model(x).sum().backward()  # the warm-up compiles forward and backward
    stats = dict(torch._dynamo.utils.counters["stats"])
    names: list[str] = []
    depth: list[int] = []
    with CompiledTracer(lambda n: (names.append(n), depth.append(1)), lambda: depth.pop()):
        model(x).sum().backward()
    assert dict(torch._dynamo.utils.counters["stats"]) == stats
    assert names and not depth
    found = labels(names)
    assert {(x.op, x.phase) for x in found} >= {
        ("aten::addmm", "forward"),
        ("aten::mm", "backward"),
    }
    assert any("scaled_dot_product" in x.op and x.phase == "forward" for x in found)
    assert any("scaled_dot_product" in x.op and x.phase == "backward" for x in found)
    addmm = next(x for x in found if x.op == "aten::addmm")
    assert (
        addmm.shapes == "[192];[32,64];[64,192]" and addmm.input_types == "float32,float32,float32"
    )
    assert all(x.module is None for x in found)  # a compiled graph runs no module
    for module in _output_code_modules():
        assert type(module.__dict__["torch"]).__name__ == "module"
    names.clear()
    model(x).sum().backward()
    assert not names


def test_a_factorys_type_is_the_one_its_meta_call_gives():
    """Issue 25: the common factories' types come from PyTorch's rule, not a meta call (meta
    kernels load on first use: 1.8 s more in a transformer's measured iteration); each equals
    what the meta device says."""
    import torch

    from profkit import annotate

    a = annotate.Annotator.__new__(annotate.Annotator)
    a.torch = torch
    aten = torch.ops.aten
    cases = [
        (aten.arange.default, (10,), {}),
        (aten.arange.start, (0, 10), {}),
        (aten.arange.start_step, (0, 1.0, 0.1), {}),
        (aten.full.default, ((2, 2), 1.5), {}),
        (aten.full.default, ((2, 2), 1), {}),
        (aten.full.default, ((2, 2), True), {}),
        (aten.full.default, ((2, 2), float("-inf")), {}),
        (aten.zeros.default, ((2, 2),), {}),
        (aten.ones.default, ((3,),), {"dtype": torch.float16}),
        (aten.randint.low, (0, 5, (3,)), {}),
        (aten.eye.default, (3,), {}),
        (aten.empty.memory_format, ((2,),), {}),
        (aten.randperm.default, (5,), {}),
        (aten.scalar_tensor.default, (2,), {}),
        (aten.linspace.default, (0, 1, 5), {}),
        (aten.linspace.default, (0, 1j, 5), {}),
        (aten.arange.default, (True,), {}),
        (aten.full.default, ((2,), 1j), {}),
    ]
    for func, args, kwargs in cases:
        made = func(*args, **{**kwargs, "device": "meta"})
        assert a._made(func, args, {**kwargs, "device": "cpu"}) == [
            str(made.dtype).removeprefix("torch.")
        ], func
