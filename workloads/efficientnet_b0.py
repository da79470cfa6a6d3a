"""EfficientNet-B0 (torchvision, random weights), one forward pass on 224x224 images: depthwise convolutions, squeeze-and-excitation, SiLU."""

SIZE = 224  # image height and width


def build(spec):
    import torch
    import torchvision

    return torchvision.models.efficientnet_b0(weights=None), (
        torch.randn(spec.batch_size, 3, SIZE, SIZE),
    )
