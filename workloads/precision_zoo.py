"""One matrix product in each precision the GPU offers (fp64, fp32 with and without TF32, fp16,
bf16, fp8, int8) plus an fp32 and an fp16 convolution: a reference for what each precision's
kernels are called and what the tensor-core counters say about them. Ignores --precision."""

PRECISIONS = ("fp32",)  # each product in its own precision, whatever --precision says
MODES = ("eager",)


def build(spec):
    import torch

    dev = torch.device(spec.device)
    n = 256 * max(1, spec.batch_size // 8)
    a32 = torch.randn(n, n, device=dev)
    b32 = torch.randn(n, n, device=dev)
    a64, b64 = a32.double(), b32.double()
    a16, b16 = a32.half(), b32.half()
    abf, bbf = a32.bfloat16(), b32.bfloat16()
    x = torch.randn(8, 64, 56, 56, device=dev)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).to(dev)
    conv16 = torch.nn.Conv2d(64, 64, 3, padding=1).to(dev).half()
    cuda = dev.type == "cuda"
    fp8 = (
        cuda and hasattr(torch, "float8_e4m3fn") and torch.cuda.get_device_capability(dev) >= (8, 9)
    )
    if fp8:
        a8 = a32.to(torch.float8_e4m3fn)
        b8 = b32.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major second operand
        one = torch.tensor(1.0, device=dev)
    if cuda:
        i8a = torch.randint(-8, 8, (n, n), dtype=torch.int8, device=dev)
        i8b = torch.randint(-8, 8, (n, n), dtype=torch.int8, device=dev)

    def step():
        with torch.inference_mode():
            torch.matmul(a64, b64)
            prev = torch.backends.cuda.matmul.allow_tf32
            try:
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.matmul(a32, b32)
                torch.backends.cuda.matmul.allow_tf32 = True
                torch.matmul(a32, b32)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = prev
            torch.matmul(a16, b16)
            torch.matmul(abf, bbf)
            conv(x)
            conv16(x.half())
            if fp8:
                torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            if cuda:
                torch._int_mm(i8a, i8b)

    return step
