"""torchvision's DeepLabV3-ResNet50 (random weights), one forward pass on 513x513 images, the
size its papers evaluate at: dilated convolutions at a resolution no power of two divides, where
cuDNN's default choice of algorithm and its autotuned one may differ (benchmarks/tune_gpu.sh)."""

CHANNELS_LAST = True


def build(spec):
    import torch
    import torchvision

    model = torchvision.models.segmentation.deeplabv3_resnet50(
        weights=None, weights_backbone=None, aux_loss=False
    )
    return model, (torch.randn(spec.batch_size, 3, 513, 513),)
