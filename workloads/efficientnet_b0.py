"""EfficientNet-B0 (torchvision, random weights), one forward pass on 224x224 images: depthwise convolutions, squeeze-and-excitation, SiLU."""


def build(spec):
    import torch
    import torchvision

    return torchvision.models.efficientnet_b0(weights=None), (torch.randn(spec.batch_size, 3, 224, 224),)
