"""Masked-language-model training step of Hugging Face's BertForMaskedLM, built from a config
(nothing downloaded): 2 layers of width 256, 4 heads, BERT's vocabulary of 30522 tokens (not a
multiple of 8: the decoder GEMM at ``cls.predictions.decoder``), 128 tokens, 15% of them
masked (labels -100 elsewhere), AdamW."""

PRECISIONS = ("fp32", "amp")
MODES = ("eager", "compile")
TOKENS = 128
VOCAB = 30522
# Hugging Face's attention implementation: None, its default (SDPA where the model has it).
ATTENTION = None


def build(spec):
    import torch
    from transformers import BertConfig, BertForMaskedLM

    from profkit.steps import training_step

    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=1024, max_position_embeddings=TOKENS,
                        attn_implementation=ATTENTION)
    ids = torch.randint(0, VOCAB, (spec.batch_size, TOKENS))
    labels = ids.clone()
    labels[torch.rand(ids.shape) > 0.15] = -100

    def loss(out, targets):
        return torch.nn.functional.cross_entropy(out.logits.reshape(-1, VOCAB).float(), targets.reshape(-1),
                                                 ignore_index=-100)

    model = BertForMaskedLM(config)
    if spec.mode == "compile":
        model = torch.compile(model)
    return training_step(model, spec, (ids,), labels, lambda p: torch.optim.AdamW(p, lr=1e-4), loss)
