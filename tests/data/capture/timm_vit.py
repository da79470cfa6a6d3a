"""timm's ViT-B/16 (random weights, nothing downloaded), 224 x 224 images."""

MODES = ("eager", "compile")


def build(spec):
    import timm
    import torch

    torch.manual_seed(0)
    return timm.create_model("vit_base_patch16_224", pretrained=False), (torch.randn(spec.batch_size, 3, 224, 224),)
