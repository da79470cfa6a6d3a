"""ResNet-18 training step (torchvision, random weights, SGD with momentum): forward, loss, backward, optimizer step.
With --precision amp the forward runs under autocast with a GradScaler."""

PRECISIONS = ("fp32", "amp")
MODES = ("eager",)
CHANNELS_LAST = True  # build(spec) applies spec.channels_last (profkit.steps)
SIZE = 224  # image height and width


def build(spec):
    import torchvision

    from profkit.steps import image_classifier_step

    return image_classifier_step(torchvision.models.resnet18(weights=None), spec, size=SIZE)
