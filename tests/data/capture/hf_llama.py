"""A Llama-style causal LM from Hugging Face transformers, built from a config (nothing
downloaded): 2 decoder layers of width 256, 8 heads (2 key-value heads), vocabulary 32000,
128 tokens per sequence. RMS norms and rotary embeddings upcast to fp32 by design."""

MODES = ("eager", "compile")  # torch.jit.trace cannot trace its cache object
TOKENS = 128


def build(spec):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=TOKENS,
                         use_cache=False, attn_implementation="sdpa")
    ids = torch.randint(0, config.vocab_size, (spec.batch_size, TOKENS))
    return LlamaForCausalLM(config), (ids,)
