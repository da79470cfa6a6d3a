"""Training step of a word-level LSTM language model written as pytorch/examples'
word_language_model writes it (embedding, a two-layer nn.LSTM, dropout, a linear decoder over
the vocabulary), with a hidden size of 1020 (not a multiple of 8), embeddings of 512, a
10000-word vocabulary, 35 tokens by a batch of sequences, SGD; lstm_lm_aligned.py is the same
with a hidden size of 1024. ``fp16`` casts the model
(cuDNN's RNN in half precision), ``amp`` runs it under autocast."""

PRECISIONS = ("fp32", "fp16", "amp")
MODES = ("eager",)
TOKENS = 35
VOCAB = 10000
HIDDEN = 1020
EMBED = 512


def step(spec, hidden):
    import torch
    from torch import nn

    from profkit.steps import training_step

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.2)
            self.encoder = nn.Embedding(VOCAB, EMBED)
            self.rnn = nn.LSTM(EMBED, hidden, 2, dropout=0.2)
            self.decoder = nn.Linear(hidden, VOCAB)

        def forward(self, tokens):
            emb = self.drop(self.encoder(tokens))
            output, _ = self.rnn(emb)
            return self.decoder(self.drop(output))

    torch.manual_seed(0)
    model = RNNModel()
    if spec.precision == "fp16":
        model = model.half()
    tokens = torch.randint(0, VOCAB, (TOKENS, spec.batch_size))
    targets = torch.randint(0, VOCAB, (TOKENS, spec.batch_size))

    def loss(out, target):
        return nn.functional.cross_entropy(out.reshape(-1, VOCAB).float(), target.reshape(-1))

    return training_step(model, spec, (tokens,), targets, lambda p: torch.optim.SGD(p, lr=0.1), loss)


def build(spec):
    return step(spec, HIDDEN)
