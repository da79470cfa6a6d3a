"""ResNet-18 training step (torchvision, random weights, SGD): forward, loss, backward, step.
With --precision amp the forward runs under autocast with a GradScaler."""

PRECISIONS = ("fp32", "amp")
MODES = ("eager",)


def build(spec):
    import torch
    import torchvision

    dev = torch.device(spec.device)
    model = torchvision.models.resnet18(weights=None).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(spec.batch_size, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (spec.batch_size,), device=dev)
    amp = spec.precision == "amp"
    amp_dtype = torch.float16 if dev.type == "cuda" else torch.bfloat16
    scaler = torch.amp.GradScaler(dev.type, enabled=amp and dev.type == "cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=amp_dtype, enabled=amp):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return step
