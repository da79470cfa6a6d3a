"""lstm_lm.py with a hidden size of 1024 (a multiple of 8): the fix of its misaligned GEMMs."""

PRECISIONS = ("fp32", "fp16", "amp")
MODES = ("eager",)


def build(spec):
    from pathlib import Path

    from profkit.workloads import load_module

    return load_module(Path(__file__).with_name("lstm_lm.py")).step(spec, 1024)
