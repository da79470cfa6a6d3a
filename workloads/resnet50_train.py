"""ResNet-50 training step (torchvision, random weights, SGD with momentum): forward, loss, backward, optimizer step.
With --precision amp the forward runs under autocast with a GradScaler."""

PRECISIONS = ("fp32", "amp")
MODES = ("eager",)


def build(spec):
    import torch
    import torchvision

    from profkit.steps import training_step

    x = torch.randn(spec.batch_size, 3, 224, 224)
    y = torch.randint(0, 1000, (spec.batch_size,))
    return training_step(torchvision.models.resnet50(weights=None), spec, (x,), y,
                         lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9), torch.nn.CrossEntropyLoss())
