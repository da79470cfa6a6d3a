"""Training steps on synthetic batches, shared by the built-in training workloads: forward,
loss, backward and optimizer step, with ``--precision amp`` as users apply it (the forward
under autocast, the loss scaled by a GradScaler; fp16 on a GPU, bf16 on a CPU, where no
scaler is needed). Imported by workload files inside the profiled process only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def training_step(
    model: Any,
    spec: Any,
    inputs: tuple[Any, ...],
    targets: Any,
    optimizer: Callable[[Any], Any],
    loss: Callable[[Any, Any], Any],
    wrap: Callable[[Any], Any] | None = None,
) -> Callable[[], Any]:
    """One step of ``model`` (built on the CPU in fp32) on ``inputs`` and ``targets`` (moved to
    ``spec.device``): zero the gradients, forward, ``loss(output, targets)``, backward, step.
    ``wrap`` (:func:`data_parallel`) wraps the model once it is on its device and laid out."""
    import torch

    dev = torch.device(spec.device)
    model = model.to(dev).train()
    inputs = tuple(x.to(dev) for x in inputs)
    if getattr(spec, "channels_last", False):  # the workload says CHANNELS_LAST = True: images here
        model = model.to(memory_format=torch.channels_last)
        inputs = tuple(
            x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x for x in inputs
        )
    targets = targets.to(dev)
    if wrap is not None:
        model = wrap(model)
    opt = optimizer(model.parameters())
    amp = spec.precision == "amp"
    amp_dtype = torch.float16 if dev.type == "cuda" else torch.bfloat16
    scaler = torch.amp.GradScaler(dev.type, enabled=amp and dev.type == "cuda")

    def step() -> Any:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=amp_dtype, enabled=amp):
            value = loss(model(*inputs), targets)
        scaler.scale(value).backward()
        scaler.step(opt)
        scaler.update()
        return value

    # The harness reads the loss scale before and after the measured steps (outside them: the
    # read syncs): each step whose gradients overflowed halved it and skipped the optimizer.
    step.scaler = scaler if scaler.is_enabled() else None  # type: ignore[attr-defined]
    return step


def image_classifier_step(
    model: Any, spec: Any, classes: int = 1000, size: int = 224, distributed: bool = False
) -> Callable[[], Any]:
    """:func:`training_step` of an image classifier on random ``size`` x ``size`` images and
    labels, with SGD (momentum 0.9) and cross-entropy: the torchvision training workloads.
    ``distributed``: data-parallel (:func:`data_parallel`), each rank on a batch of its own."""
    import torch

    gen = None
    if distributed:
        import torch.distributed as dist

        _join(spec)
        # the same weights, a batch per rank
        gen = torch.Generator().manual_seed(1000 + dist.get_rank())
    x = torch.randn(spec.batch_size, 3, size, size, generator=gen)
    y = torch.randint(0, classes, (spec.batch_size,), generator=gen)
    return training_step(
        model,
        spec,
        (x,),
        y,
        lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
        torch.nn.CrossEntropyLoss(),
        wrap=(lambda m: data_parallel(m, spec)) if distributed else None,
    )


def data_parallel(model: Any, spec: Any) -> Any:
    """``model`` (on its device) in DistributedDataParallel over the process group: the one
    profkit's harness joined for ``--nproc-per-node N`` (each rank on the GPU of its local
    rank), or, run as one process, a group of one, so that the same workload runs (and
    launches its all-reduce kernels) either way."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    _join(spec)
    if torch.device(spec.device).type == "cuda":
        return DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
    return DistributedDataParallel(model)


def _join(spec: Any) -> None:
    """A process group of one (this process) unless one is joined already."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if torch.device(spec.device).type == "cuda" else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
