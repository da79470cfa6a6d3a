"""ResNet-50 data-parallel training step (torchvision, random weights, SGD with momentum) in
DistributedDataParallel: forward, loss, backward with the gradients all-reduced (NCCL on GPUs,
gloo on the CPU) in buckets while the backward runs, optimizer step. Each rank trains on a
batch of its own. Run it with --nproc-per-node N for N ranks (one GPU each); alone it is a
group of one. With --precision amp the forward runs under autocast with a GradScaler."""

PRECISIONS = ("fp32", "amp")
MODES = ("eager",)
CHANNELS_LAST = True  # build(spec) applies spec.channels_last (profkit.steps)
SIZE = 224  # image height and width


def build(spec):
    import torchvision

    from profkit.steps import image_classifier_step

    return image_classifier_step(
        torchvision.models.resnet50(weights=None), spec, size=SIZE, distributed=True
    )
