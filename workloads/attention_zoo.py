"""Scaled dot-product attention through each backend PyTorch has (flash, memory-efficient, cuDNN, math) at BERT-base shapes in the precision given, plus on Hopper an fp8 GEMM with row-wise scales and a bf16 grouped GEMM (CUTLASS 3 in PyTorch): a reference for what attention and library kernels are called and what the counters say about them."""

PRECISIONS = ("fp32", "fp16", "bf16")
MODES = ("eager",)
CHANNELS_LAST = False  # no image tensors to lay out

HEADS, TOKENS, HEAD_DIM = 12, 128, 64


def build(spec):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    dev = torch.device(spec.device)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[spec.precision]
    q, k, v = (
        torch.randn(spec.batch_size, HEADS, TOKENS, HEAD_DIM, device=dev, dtype=dtype)
        for _ in range(3)
    )
    # Each backend that takes these inputs on this device (flash and cuDNN take no fp32, and
    # none but math runs on a CPU), causal and not.
    usable = []
    for backend in (
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.CUDNN_ATTENTION,
        SDPBackend.MATH,
    ):
        for causal in (False, True):
            try:
                with sdpa_kernel(backend), torch.inference_mode():
                    sdpa(q, k, v, is_causal=causal)
            except RuntimeError:
                continue
            usable.append((backend, causal))
    fp8 = None
    if (
        dev.type == "cuda"
        and torch.cuda.get_device_capability(dev) >= (9, 0)
        and hasattr(torch, "float8_e4m3fn")
    ):
        n = 256
        a8 = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
        # column-major
        b8 = torch.randn(n, n, device=dev).t().contiguous().to(torch.float8_e4m3fn).t()
        rows, cols = torch.ones(n, 1, device=dev), torch.ones(1, n, device=dev)
        try:
            torch._scaled_mm(a8, b8, scale_a=rows, scale_b=cols, out_dtype=torch.bfloat16)
            fp8 = (a8, b8, rows, cols)
        except RuntimeError:
            fp8 = None

    grouped = None  # torch._grouped_mm: a mixture-of-experts style bf16 GEMM per group
    if (
        dev.type == "cuda"
        and torch.cuda.get_device_capability(dev) >= (9, 0)
        and hasattr(torch, "_grouped_mm")
    ):
        ga = torch.randn(4 * 64, 128, device=dev, dtype=torch.bfloat16)
        gb = (
            torch.randn(4, 128, 256, device=dev, dtype=torch.bfloat16)
            .transpose(-2, -1)
            .contiguous()
            .transpose(-2, -1)
        )
        offs = torch.arange(64, 4 * 64 + 1, 64, device=dev, dtype=torch.int32)
        try:
            torch._grouped_mm(ga, gb, offs=offs)
            grouped = (ga, gb, offs)
        except RuntimeError:
            grouped = None

    def step():
        with torch.inference_mode():
            for backend, causal in usable:
                with sdpa_kernel(backend):
                    sdpa(q, k, v, is_causal=causal)
            if fp8 is not None:
                a, b, sa, sb = fp8
                torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
            if grouped is not None:
                torch._grouped_mm(grouped[0], grouped[1], offs=grouped[2])

    return step
