"""A compiled model's kernels traced to what torch.compile fused into them.

The harness reads Inductor's output code once the warm-up has compiled the model
(``profkit.annotate.compiled_kernels``: per generated Triton kernel, the ATen operators its
comment says it fused and the element types of its compiled signature) and stores the map
with the run (``RunInfo.harness["compiled_kernels"]``). Here the capture's kernels of those
names get them as their ``op`` (the operators joined by ``+``) and ``input_types``, the
precision then coming from the types where the name says none, under every tool: streamed
rows as they pass, a bulk import's rows in the store once written.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, cast

from ..records import CompiledKernel
from .schema import Capture, ClassifiedRow, KernelRow


def columns(kernel: CompiledKernel) -> tuple[str | None, str | None]:
    """(op, input_types) of a generated kernel."""
    return "+".join(kernel.get("ops") or []) or None, kernel.get("input_types") or None


def with_compiled_kernels(
    capture: Capture[KernelRow], kernels: Mapping[str, CompiledKernel] | None
) -> None:
    """Give ``capture``'s rows of generated kernels their fused operators and input types (in
    place: its rows, and its bulk import where it has one)."""
    if not kernels:
        return
    known = {name: columns(k) for name, k in kernels.items()}

    def rows(source: Iterator[KernelRow]) -> Iterator[KernelRow]:
        for r in source:
            found = known.get(r["short_name"])
            if found is not None and r["kind"] == "kernel":
                op, types = found
                if op:
                    r["op"] = op
                if types:
                    r["input_types"] = types
                    if "evidence" in r:
                        _judge_again(cast(ClassifiedRow, r), types)
            yield r

    capture.rows = rows(capture.rows)
    bulk = capture.bulk
    if bulk is not None:

        def bulk_then_attribute(store: Any, run_id: int) -> tuple[str, int, int]:
            from ..classify import classify_row

            result = bulk(store, run_id)
            store.set_kernel_columns(run_id, known)
            store.judge_by_inputs(
                run_id, lambda name, types: classify_row("kernel", name, None, types)
            )
            return result

        capture.bulk = bulk_then_attribute


def _judge_again(row: ClassifiedRow, types: str) -> None:
    """A row its importer judged before its types were known (ncu's per-function plan judges a
    function once, from its counters): off the tensor cores, a precision that counters gave
    (CUDA-core instructions: Triton computes half data in fp32) or none gives way to the
    operators' types, as :func:`profkit.classify.last_resorts` orders them."""
    from ..classify import Verdict, from_inputs

    if row["tensor_core"] or not (row["precision"] == "unknown" or row["evidence"] == "metrics"):
        return
    v = from_inputs(
        Verdict(
            "unknown", row["tensor_core"], row["family"], row["evidence"], row["evidence_detail"]
        ),
        types,
    )
    if v.precision != "unknown":
        row["precision"], row["evidence"], row["evidence_detail"] = (
            v.precision,
            v.evidence,
            v.evidence_detail,
        )
