"""EfficientNet-B0 (torchvision, random weights): depthwise convolutions and squeeze-excitation."""


def build(spec):
    import torch
    import torchvision

    return torchvision.models.efficientnet_b0(weights=None), (torch.randn(spec.batch_size, 3, 224, 224),)
