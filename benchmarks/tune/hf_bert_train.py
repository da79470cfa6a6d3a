"""A plain Hugging Face training loop as people write it: BERT-base (random weights, the
library's default config) or XLM-RoBERTa-base (the published config's sizes: a 250,002-word
vocabulary, so most of its 278M parameters are embeddings) for sequence classification on
random tokens, bf16 autocast, and torch.optim.AdamW as made by default (its foreach kernels,
not fused). Nothing of profkit's in it: benchmarks/tune_gpu.sh runs it under
`profkit tune -- python hf_bert_train.py`."""

import argparse

import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    XLMRobertaConfig,
    XLMRobertaForSequenceClassification,
)

parser = argparse.ArgumentParser()
parser.add_argument("--model", choices=["bert-base", "xlm-roberta-base"], default="bert-base")
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--seq-len", type=int, default=128)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
if args.model == "bert-base":
    config = BertConfig(num_labels=2)
    model = BertForSequenceClassification(config).to(device)
else:  # xlm-roberta-base's config.json on the Hub
    config = XLMRobertaConfig(
        vocab_size=250002,
        max_position_embeddings=514,
        type_vocab_size=1,
        layer_norm_eps=1e-5,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        num_labels=2,
    )
    model = XLMRobertaForSequenceClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
model.train()
for step in range(args.steps):
    ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len), device=device)
    labels = torch.randint(0, 2, (args.batch_size,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        out = model(input_ids=ids, labels=labels)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step % 20 == 0:
        print(f"step {step} loss {out.loss.item():.4f}")
