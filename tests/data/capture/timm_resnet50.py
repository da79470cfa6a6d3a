"""timm's ResNet-50 (random weights, nothing downloaded) in inference on 224 x 224 images; run it
with ``--channels-last`` for the NHWC layout."""


def build(spec):
    import timm
    import torch

    torch.manual_seed(0)
    return timm.create_model("resnet50", pretrained=False), (torch.randn(spec.batch_size, 3, 224, 224),)
