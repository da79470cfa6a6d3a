"""Self-attention written the way many hand-rolled models do it: heads split and merged with
transpose().contiguous(), so each layer copies its activations between layouts twice."""

CHANNELS_LAST = False


def build(spec):
    import torch

    class Attention(torch.nn.Module):
        def __init__(self, dim=256, heads=8):
            super().__init__()
            self.heads = heads
            self.qkv = torch.nn.Linear(dim, 3 * dim)
            self.out = torch.nn.Linear(dim, dim)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2).contiguous() for z in (q, k, v))
            a = torch.softmax(q @ k.transpose(-1, -2).contiguous() / (d // self.heads) ** 0.5, dim=-1)
            y = (a @ v).transpose(1, 2).contiguous().view(b, t, d)
            return self.out(y)

    model = torch.nn.Sequential(*[Attention() for _ in range(4)])
    return model, (torch.randn(spec.batch_size, 256, 256),)
