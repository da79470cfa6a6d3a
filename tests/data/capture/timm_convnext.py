"""timm's ConvNeXt-Tiny (random weights, nothing downloaded): 7 x 7 depthwise convolutions,
LayerNorm, 224 x 224 images."""


def build(spec):
    import timm
    import torch

    torch.manual_seed(0)
    return timm.create_model("convnext_tiny", pretrained=False), (torch.randn(spec.batch_size, 3, 224, 224),)
