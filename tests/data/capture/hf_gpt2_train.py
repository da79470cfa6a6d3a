"""Training step of a GPT-2-style causal LM from Hugging Face transformers, built from a config
(nothing downloaded): 2 layers of width 256, GPT-2's vocabulary of 50257 tokens (not a multiple
of 8), 128 tokens, AdamW. hf_gpt2_train_padded.py is the same with the vocabulary padded."""

PRECISIONS = ("fp32", "amp")
MODES = ("eager",)
TOKENS = 128
VOCAB = 50257


def step(spec, vocab, change=None):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from profkit.steps import training_step

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=vocab, n_embd=256, n_layer=2, n_head=4, n_positions=TOKENS, use_cache=False)
    ids = torch.randint(0, 50257, (spec.batch_size, TOKENS))

    def loss(out, targets):
        logits = out.logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))

    model = GPT2LMHeadModel(config)
    if change is not None:  # hf_gpt2_fp32_head.py: the model as a user changed it
        model = change(model)
    return training_step(model, spec, (ids,), ids, lambda p: torch.optim.AdamW(p, lr=1e-4), loss)


def build(spec):
    return step(spec, VOCAB)
