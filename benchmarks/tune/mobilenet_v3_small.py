"""torchvision's MobileNetV3-Small (random weights), one forward pass on 224x224 images: at batch
1 its ~150 small kernels leave the GPU idle between launches (benchmarks/tune_gpu.sh)."""


def build(spec):
    import torch
    import torchvision

    model = torchvision.models.mobilenet_v3_small(weights=None)
    return model, (torch.randn(spec.batch_size, 3, 224, 224),)
