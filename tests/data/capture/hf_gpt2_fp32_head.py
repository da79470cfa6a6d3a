"""hf_gpt2_train_padded.py (vocabulary 50304) with its output layer run in fp32 outside autocast,
as a user does "for numerical stability": `with torch.autocast("cuda", enabled=False):
lm_head(h.float())`. In an AMP step that GEMM and its two backward GEMMs run in fp32 (the
fp32_matrix_outside_autocast finding); hf_gpt2_train_padded.py is the fix."""

PRECISIONS = ("fp32", "amp")
MODES = ("eager",)


def build(spec):
    from pathlib import Path

    import torch

    from profkit.workloads import load_module

    gpt2 = load_module(Path(__file__).with_name("hf_gpt2_train.py"))

    class Fp32Head(torch.nn.Module):
        def __init__(self, head):
            super().__init__()
            self.head = head

        def forward(self, h):
            with torch.autocast(h.device.type, enabled=False):
                return self.head(h.float())

    def fp32_head(model):
        model.lm_head = Fp32Head(model.lm_head)
        return model

    return gpt2.step(spec, 50304, fp32_head)
