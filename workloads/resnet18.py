"""ResNet-18 (torchvision, random weights), one forward pass on 224x224 images; small and quick."""

SIZE = 224  # image height and width


def build(spec):
    import torch
    import torchvision

    model = torchvision.models.resnet18(weights=None)
    return model, (torch.randn(spec.batch_size, 3, SIZE, SIZE),)
