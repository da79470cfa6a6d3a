"""hf_gpt2_train.py with the vocabulary padded to 50304, a multiple of 64 (the fix)."""

PRECISIONS = ("fp32", "amp")
MODES = ("eager",)


def build(spec):
    from pathlib import Path

    from profkit.workloads import load_module

    return load_module(Path(__file__).with_name("hf_gpt2_train.py")).step(spec, 50304)
