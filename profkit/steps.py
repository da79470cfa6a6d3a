"""Training steps on synthetic batches, shared by the built-in training workloads: forward,
loss, backward and optimizer step, with ``--precision amp`` as users apply it (the forward
under autocast, the loss scaled by a GradScaler; fp16 on a GPU, bf16 on a CPU, where no
scaler is needed). Imported by workload files inside the profiled process only."""

from __future__ import annotations

from typing import Any, Callable


def training_step(model: Any, spec: Any, inputs: tuple[Any, ...], targets: Any,
                  optimizer: Callable[[Any], Any], loss: Callable[[Any, Any], Any]) -> Callable[[], Any]:
    """One step of ``model`` (built on the CPU in fp32) on ``inputs`` and ``targets`` (moved to
    ``spec.device``): zero the gradients, forward, ``loss(output, targets)``, backward, step."""
    import torch

    dev = torch.device(spec.device)
    model = model.to(dev).train()
    inputs = tuple(x.to(dev) for x in inputs)
    if getattr(spec, "channels_last", False):  # the workload says CHANNELS_LAST = True: images here
        model = model.to(memory_format=torch.channels_last)
        inputs = tuple(x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x for x in inputs)
    targets = targets.to(dev)
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


def image_classifier_step(model: Any, spec: Any, classes: int = 1000, size: int = 224) -> Callable[[], Any]:
    """:func:`training_step` of an image classifier on random ``size`` x ``size`` images and
    labels, with SGD (momentum 0.9) and cross-entropy: the torchvision training workloads."""
    import torch

    x = torch.randn(spec.batch_size, 3, size, size)
    y = torch.randint(0, classes, (spec.batch_size,))
    return training_step(model, spec, (x,), y, lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
                         torch.nn.CrossEntropyLoss())
