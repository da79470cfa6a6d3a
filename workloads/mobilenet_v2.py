"""MobileNetV2 (torchvision, random weights), one forward pass on 224x224 images: depthwise 3x3 convolutions between pointwise ones."""

SIZE = 224  # image height and width


def build(spec):
    import torch
    import torchvision

    return torchvision.models.mobilenet_v2(weights=None), (
        torch.randn(spec.batch_size, 3, SIZE, SIZE),
    )
