"""host_sync_train.py without its host syncs (the host_syncs finding's fix): the loss skips the
unlabelled tokens with `ignore_index` instead of boolean-mask indexing, and the logged loss
stays on the GPU (`.detach()`, no `.item()`)."""

PRECISIONS = ("fp32", "amp")
MODES = ("eager",)


def build(spec):
    from pathlib import Path

    from profkit.workloads import load_module

    return load_module(Path(__file__).with_name("host_sync_train.py")).step(spec, fixed=True)
