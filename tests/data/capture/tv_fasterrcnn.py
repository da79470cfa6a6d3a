"""torchvision's Faster R-CNN (ResNet-50 FPN backbone, random weights, nothing downloaded) in
inference, as its reference evaluation runs it: two 512 x 512 images, the region proposals,
box head and the post-processing (score threshold, per-class NMS) whose shapes depend on the
data."""

PRECISIONS = ("fp32", "amp")
MODES = ("eager",)


def build(spec):
    import torch
    from torchvision.models.detection import fasterrcnn_resnet50_fpn

    torch.manual_seed(0)
    model = fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, min_size=512, max_size=512)
    images = [torch.rand(3, 512, 512) for _ in range(spec.batch_size)]
    return model, (images,)
