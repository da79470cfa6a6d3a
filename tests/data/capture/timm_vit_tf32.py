"""timm_vit.py with TF32 on for fp32 matmuls and convolutions (the tf32_left_off finding's fix):
torch.set_float32_matmul_precision("high")."""

MODES = ("eager", "compile")


def build(spec):
    from pathlib import Path

    import torch

    from profkit.workloads import load_module

    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    return load_module(Path(__file__).with_name("timm_vit.py")).build(spec)
