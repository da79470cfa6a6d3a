"""A Hugging Face BERT-base encoder (random weights, the library's default config), one forward
pass of 512-token sequences in fp32: large matrix products on a GPU-bound step, where the
precision fixes (TF32, autocast) are what can gain (benchmarks/tune_gpu.sh)."""

PRECISIONS = ("fp32", "fp16", "bf16", "amp")


def build(spec):
    import torch
    from transformers import BertConfig, BertModel

    config = BertConfig()
    model = BertModel(config)
    ids = torch.randint(0, config.vocab_size, (spec.batch_size, 512))
    return model, (ids,)
