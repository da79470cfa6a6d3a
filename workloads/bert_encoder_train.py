"""Training step of the BERT-base-sized transformer encoder (12 layers, width 768, 128 tokens) with a classification head, AdamW: forward, loss, backward, optimizer step.
With --precision amp the forward runs under autocast with a GradScaler."""

PRECISIONS = ("fp32", "amp")
MODES = ("eager",)
CHANNELS_LAST = False  # no image tensors to lay out
TOKENS = 128  # sequence length


def build(spec):
    from pathlib import Path

    import torch

    from profkit.steps import training_step
    from profkit.workloads import load_module

    bert = load_module(Path(__file__).with_name("bert_encoder.py"))  # the encoder beside this file

    class Classifier(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = bert.encoder()
            self.head = torch.nn.Linear(bert.WIDTH, 2)

        def forward(self, x):
            return self.head(self.encoder(x)[:, 0])

    x = torch.randn(spec.batch_size, TOKENS, bert.WIDTH)
    y = torch.randint(0, 2, (spec.batch_size,))
    return training_step(
        Classifier(),
        spec,
        (x,),
        y,
        lambda params: torch.optim.AdamW(params, lr=1e-4),
        torch.nn.CrossEntropyLoss(),
    )
