"""timm's ViT-B/16 (random weights), one forward pass on 224x224 images: profkit tune's fp32
transformer (benchmarks/tune_gpu.sh)."""

PRECISIONS = ("fp32", "fp16", "bf16", "amp")


def build(spec):
    import timm
    import torch

    model = timm.create_model("vit_base_patch16_224", pretrained=False)
    return model, (torch.randn(spec.batch_size, 3, 224, 224),)
