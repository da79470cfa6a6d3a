"""Transformer encoder the size of BERT-base (12 layers, width 768, 12 heads, GELU feed-forward 3072), one forward pass over 128 tokens."""

CHANNELS_LAST = False  # no image tensors to lay out

LAYERS, WIDTH, HEADS, FFN, TOKENS = 12, 768, 12, 3072, 128


def encoder():
    import torch

    layer = torch.nn.TransformerEncoderLayer(
        WIDTH, HEADS, FFN, dropout=0.0, activation="gelu", batch_first=True
    )
    return torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)


def build(spec):
    import torch

    return encoder(), (torch.randn(spec.batch_size, TOKENS, WIDTH),)
