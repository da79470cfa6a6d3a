"""VGG16 (torchvision, random weights), one forward pass on 224x224 images."""

SIZE = 224  # image height and width


def build(spec):
    import torch
    import torchvision

    model = torchvision.models.vgg16(weights=None)
    return model, (torch.randn(spec.batch_size, 3, SIZE, SIZE),)
