"""ResNet-18 with cuDNN's autotuner on (torch.backends.cudnn.benchmark): the same work as the
built-in resnet18, with convolution algorithms (tile variants) chosen by timing them."""


def build(spec):
    import torch
    import torchvision

    torch.backends.cudnn.benchmark = True
    return torchvision.models.resnet18(weights=None), (torch.randn(spec.batch_size, 3, 224, 224),)
