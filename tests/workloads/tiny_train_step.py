"""A tiny training step (two linear layers, SGD, cross-entropy), built with
profkit.steps.training_step as the built-in *_train workloads are: it builds its own step, so
profkit bench has no model output to compare with fp32 eager's."""

PRECISIONS = ("fp32", "amp")
MODES = ("eager",)


def build(spec):
    import torch

    from profkit.steps import training_step

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    x, y = torch.randn(spec.batch_size, 32), torch.randint(0, 10, (spec.batch_size,))
    return training_step(model, spec, (x,), y, lambda params: torch.optim.SGD(params, lr=0.01),
                         torch.nn.CrossEntropyLoss())
