"""torchvision's R3D-18 video classifier (random weights), one forward pass of 16-frame 112x112
clips: 3-D convolutions, GPU-bound at batch 8, where cuDNN's autotuning chooses among many more
algorithms than for 2-D ones. Its inputs are 5-D, so channels-last (a 4-D layout) does not apply
(benchmarks/tune_gpu.sh)."""

CHANNELS_LAST = False


def build(spec):
    import torch
    import torchvision

    model = torchvision.models.video.r3d_18(weights=None)
    return model, (torch.randn(spec.batch_size, 3, 16, 112, 112),)
