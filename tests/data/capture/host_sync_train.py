"""Training step of a small token classifier (embedding, two Transformer encoder layers of width
256, a 64-class head, AdamW, 256 tokens per sequence) written with the host syncs users put in
a loop: the loss over the labelled tokens by boolean-mask indexing (`logits[labels != -100]`:
its size depends on the data, so the host waits for a nonzero) and the loss logged with
`.item()` every step. host_sync_train_fixed.py is the same step with neither."""

PRECISIONS = ("fp32", "amp")
MODES = ("eager",)
TOKENS = 256
IGNORE = -100


def step(spec, fixed):
    import torch

    from profkit.steps import training_step

    torch.manual_seed(0)
    width, classes = 256, 64
    layer = torch.nn.TransformerEncoderLayer(width, 4, 1024, batch_first=True)
    model = torch.nn.Sequential(torch.nn.Embedding(8192, width), torch.nn.TransformerEncoder(layer, 2),
                                torch.nn.Linear(width, classes))
    ids = torch.randint(0, 8192, (spec.batch_size, TOKENS))
    labels = torch.randint(0, classes, (spec.batch_size, TOKENS))
    labels[:, TOKENS // 2:] = IGNORE  # padding: no label

    def loss(logits, targets):
        if fixed:  # the loss skips the unlabelled tokens itself: no shape depends on the data
            return torch.nn.functional.cross_entropy(logits.reshape(-1, classes), targets.reshape(-1),
                                                     ignore_index=IGNORE)
        keep = targets != IGNORE
        return torch.nn.functional.cross_entropy(logits[keep], targets[keep])

    train = training_step(model, spec, (ids,), labels, lambda p: torch.optim.AdamW(p, lr=1e-4), loss)
    history = []

    def logged():
        value = train()
        history.append(value.detach() if fixed else value.item())  # .item() waits for the GPU
        del history[:-100]
        return value

    logged.scaler = train.scaler
    return logged


def build(spec):
    return step(spec, fixed=False)
