"""The report's colours, in one place: one meaning per colour across every chart and badge.

Each concept has colours of its own, used by no other concept: the precisions (Paul Tol's
"muted" scheme, made to be told apart with any colour vision); where a kernel ran (tensor cores
blue, matrix work on CUDA cores vermillion: the Okabe-Ito pair; CUDA cores for kernels that do
no matrix math a neutral grey, since memory-bound work belongs there); a diff's change (faster
slate, slower dark red, apart in lightness too); the findings' severity (Okabe-Ito orange for a
finding, yellow for a caveat); the evidence behind a verdict (greys); a distributed run's time
(compute, NCCL overlapped, NCCL exposed). ``NEUTRAL`` colours mean nothing (a chart of one
series, the page's accent for links).

``page.render`` writes them as CSS variables (``--c-<concept>-<key>``, and ``...-text`` for a
badge's readable text colour); ``report.css`` and ``report.js`` read only those variables.
"""

from __future__ import annotations

PALETTE: dict[str, dict[str, str]] = {
    "precision": {  # Paul Tol, "muted"
        "fp64": "#332288",
        "fp32": "#88CCEE",
        "tf32": "#44AA99",
        "fp16": "#117733",
        "bf16": "#999933",
        "fp8": "#DDCC77",
        "int8": "#CC6677",
        "int": "#882255",
        "mixed": "#AA4499",
        "unknown": "#DDDDDD",
    },
    "tc": {  # where a kernel ran
        "tensor": "#0072B2",  # on tensor cores (Okabe-Ito blue)
        "tensor_other": "#7DB5DC",  # a kernel that does no matrix math, on tensor cores anyway
        "matrix_cuda": "#D55E00",  # matrix work (GEMM, conv, attention) on CUDA cores: the warning (vermillion)
        "cuda": "#B4BCC4",  # any other kernel on CUDA cores: normal for memory-bound work
        "mixed": "#5C7A99",  # some launches on tensor cores, some not
        "unknown": "#E3E6EA",  # nothing told
    },
    "change": {"faster": "#44546A", "slower": "#B2182B"},
    "severity": {"finding": "#E69F00", "caveat": "#F0E442"},
    "evidence": {"metrics": "#263238", "name": "#D5DADF", "dtypes": "#EDE3CC", "none": "#F4F4F4"},
    "ranks": {"compute": "#8F9BA8", "overlap": "#C3B5E3", "exposed": "#7F3B08"},
}

NEUTRAL: dict[str, str] = {
    "series": "#6B7785",
    "memory": "#3D4650",
    "accent": "#3B5BDB",
    "quiet": "#D3D7DC",
}

# What each key is called where a legend names it.
LABELS: dict[str, dict[str, str]] = {
    "tc": {
        "tensor": "tensor cores",
        "tensor_other": "other kernels on tensor cores",
        "matrix_cuda": "matrix work on CUDA cores",
        "cuda": "CUDA cores (no matrix math)",
        "mixed": "partly on tensor cores",
        "unknown": "unknown",
    },
    "change": {"faster": "faster in B", "slower": "slower in B"},
}


def text_on(colour: str) -> str:
    """Black or white, whichever reads better on ``colour`` (WCAG relative luminance)."""

    def channel(c: int) -> float:
        s = c / 255
        return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4

    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    lum = 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)
    return "#000000" if (lum + 0.05) / 0.05 > 1.05 / (lum + 0.05) else "#FFFFFF"


def css_variables() -> str:
    """The palette as one ``:root`` rule."""
    out = []
    for concept, colours in PALETTE.items():
        for key, colour in colours.items():
            out.append(
                f"--c-{concept}-{key}: {colour}; --c-{concept}-{key}-text: {text_on(colour)};"
            )
    out += [f"--c-neutral-{k}: {v};" for k, v in NEUTRAL.items()]
    return ":root { " + " ".join(out) + " }"
