"""Decoder-only language model the size of GPT-2 small's blocks (width 768, 12 heads, 4 blocks), causal self-attention over 128 tokens, token embedding to next-token logits."""

CHANNELS_LAST = False  # no image tensors to lay out

BLOCKS, WIDTH, HEADS, TOKENS, VOCAB = 4, 768, 12, 128, 50257


def model():
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
            self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
            self.mlp = nn.Sequential(
                nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH)
            )

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (y.view(b, t, HEADS, c // HEADS).transpose(1, 2) for y in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.mlp(self.ln2(x))

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens, self.positions = nn.Embedding(VOCAB, WIDTH), nn.Embedding(TOKENS, WIDTH)
            self.blocks = nn.Sequential(*(Block() for _ in range(BLOCKS)))
            self.ln, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB, bias=False)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1], device=ids.device)
            return self.head(self.ln(self.blocks(self.tokens(ids) + self.positions(pos))))

    return Decoder()


def build(spec):
    import torch

    return model(), (torch.randint(0, VOCAB, (spec.batch_size, TOKENS)),)
