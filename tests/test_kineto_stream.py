"""The Kineto importer reads a trace as a stream (issue 25): its text in chunks, one event at a
time, keeping compact records, not the text or one dict per event. What it reads is what the
whole-file reader before it read, event for event; what it refuses, it refuses in one line
with the database unchanged."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from profkit.errors import BadExport
from profkit.parse import kineto
from profkit.parse.kineto import read_kineto

from .conftest import DATA, cli, one_line_error
from .test_bad_inputs import KINETO, digest, seeded, unchanged  # noqa: F401  (seeded: a fixture)

# Golden data: the digest of what profkit.parse.kineto.read_kineto gave for every committed
# torch trace under tests/data (its rows, ranges, notes, host syncs, GPU name and compute
# capability, by :func:`read_digest`), computed by the whole-file reader (json.load) at commit
# aaa232e, before the reader streamed. The streamed reader must give the same, bit for bit.
GOLDEN = {
    # Issue 37's CPU traces with attribution: their digests as first read.
    "torch/cpu_resnet18_fp16_attribution.json.gz": "eac2fe0807441bdc",
    "torch/cpu_heads_contiguous_attribution.json.gz": "9201ac44efe46f8c",
    # Issue 36's traces of models nobody on the team wrote (findings/): their digests as first read.
    "findings/r50b64-fp16-torch/trace.json.gz": "4cadb5446c199465",
    "findings/bert-amp-compile-torch/trace.json.gz": "e539920dca0953e1",
    "findings/bert-amp-torch/trace.json.gz": "5be2bb6f658d4bd8",
    "findings/bertattn-amp-torch/trace.json.gz": "a65f4a3aeac66984",  # issue 38: HF BERT's eager attention
    "findings/frcnn-amp-torch/trace.json.gz": "5cf115bbacd1ab71",
    "findings/frcnn-fp32-torch/trace.json.gz": "7719698f0ec13974",
    "findings/lstm-amp-torch/trace.json.gz": "91c67780ff78a764",
    "findings/lstm-fp16-torch/trace.json.gz": "05a173776efbafdc",
    "findings/r50-fp16-torch/trace.json.gz": "409c5f36dfdf6dde",
    "findings/r50cl-fp16-torch/trace.json.gz": "a22d3dbf0f08596b",
    # Issue 35's trace with ProfilerStep#N ranges, made after that commit: its digest as first read.
    "torch/profiler_steps.json.gz": "80229d87b13d39ea",
    "attention/attention_zoo_bf16.torch.json.gz": "3267e68ba52ce3aa",
    "attention/attention_zoo_fp16.torch.json.gz": "e71483a635bbe133",
    "attention/bert_encoder_bf16.torch.json.gz": "2162021633b3f77d",
    "attention/bert_encoder_fp16.torch.json.gz": "50ff781ce1658711",
    "attention/gpt_decoder_fp16_compile.torch.json.gz": "66cf83488a436e7f",
    "attention/resnet18_bf16_compile.torch.json.gz": "982892067211c5b5",
    "catalog/bert_encoder-amp-compile-torch/trace.json.gz": "a85836c1b096e35f",
    "catalog/bert_encoder-bf16-compile-torch/trace.json.gz": "6bdcccf1f696eaa2",
    "catalog/bert_encoder-fp16-compile-torch/trace.json.gz": "ce12168abce9aac7",
    "catalog/efficientnet_b0-amp-compile-torch/trace.json.gz": "da8e4c83b5c6af12",
    "catalog/efficientnet_b0-bf16-compile-torch/trace.json.gz": "1950303feb107c37",
    "catalog/efficientnet_b0-fp16-compile-torch/trace.json.gz": "b23f09bfe816111b",
    "catalog/gpt_decoder-amp-compile-torch/trace.json.gz": "6750a5c48f84fec2",
    "catalog/gpt_decoder-bf16-compile-torch/trace.json.gz": "1ffeb5cef4c17434",
    "catalog/gpt_decoder-fp16-compile-torch/trace.json.gz": "df3fc2d8389fb4f1",
    "catalog/mobilenet_v2-amp-compile-torch/trace.json.gz": "9993127092ede02d",
    "catalog/mobilenet_v2-bf16-compile-torch/trace.json.gz": "83e97c837c0554e8",
    "catalog/mobilenet_v2-fp16-compile-torch/trace.json.gz": "bb75e3108f976af5",
    "catalog/resnet18-amp-compile-torch/trace.json.gz": "37d441a5f9210717",
    "catalog/resnet18-bf16-compile-torch/trace.json.gz": "6d47c6d3744c856e",
    "catalog/resnet18-fp16-compile-torch/trace.json.gz": "7c83d4d37edc88ab",
    "catalog/resnet50-amp-compile-torch/trace.json.gz": "647e097472ecdd48",
    "catalog/resnet50-bf16-compile-torch/trace.json.gz": "4c5256eeb95585a5",
    "catalog/resnet50-fp16-compile-torch/trace.json.gz": "eb3d531709124e70",
    "catalog/vgg16-amp-compile-torch/trace.json.gz": "3f1e39ac764b65b6",
    "catalog/vgg16-bf16-compile-torch/trace.json.gz": "06c8b0a95e624362",
    "catalog/vgg16-fp16-compile-torch/trace.json.gz": "1cd16d4daed4f141",
    "ddp/cpu_resnet50_ddp_train_fp32.rank0.json.gz": "8e3c82f44f9e9f5f",
    "ddp/cpu_resnet50_ddp_train_fp32.rank1.json.gz": "cfec7195ebe6fd3c",
    "ddp/torch_resnet50_ddp_train_amp.rank0.json.gz": "410a9747d407c156",
    "ddp/torch_resnet50_ddp_train_amp.rank1.json.gz": "ac8ddde4c9fc52d2",
    "diff/r18_fp16_compile_torch.json.gz": "caf3ffaa751ce0cf",
    "diff/r18_fp16_eager_torch.json.gz": "64bd8f0cbd60e585",
    "steps/bert_encoder_train_amp.torch.json.gz": "5d6f9f29f791b38e",
    "steps/resnet18_train_amp.torch.json.gz": "5630d8e80232be12",
    "torch/cpu_resnet18_bf16.json.gz": "53f54483b083b190",
    "torch/cpu_resnet18_fp32.json.gz": "c676e2f9cea44601",
    "torch/cpu_resnet18_train_fp32.json.gz": "5620825cbc5f4481",
    "torch/kineto_resnet18_fp16.json.gz": "b0ce0da78444f011",
    "torch/torch_run_resnet18_train_amp.json.gz": "bf3b2cb36af755e3",
    "where/hf_gpt2_train-amp-eager-torch/trace.json.gz": "9a1b9c62d4c883db",
    "where/hf_llama-bf16-compile-torch/trace.json.gz": "139abf8aaaebb8b8",
    "where/hf_llama-bf16-eager-torch/trace.json.gz": "2573be000d646e6b",
    "where/host_sync_train-fp32-eager-torch/trace.json.gz": "e6c284f9453d8e78",
    "where/host_sync_train_fixed-fp32-eager-torch/trace.json.gz": "87a18629127c473e",
    "where/resnet18_train-amp-eager-torch/trace.json.gz": "97cb736ce89af519",
    "where/timm_convnext-fp16-eager-torch/trace.json.gz": "8d6e8452492f71b1",
}


def read_digest(path: Path) -> str:
    c = read_kineto(path)
    rows = list(c.rows)
    d = {
        "rows": rows,
        "ranges": c.ranges,
        "notes": c.notes,
        "host_syncs": c.host_syncs,
        "gpu_name": c.gpu_name,
        "cc": c.compute_capability,
        "range_paths": c.range_paths,
    }
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def test_golden_covers_every_committed_trace():
    traces = set()
    for p in DATA.rglob("*.json*"):
        head = gzip.open(p).read(4096) if p.suffix == ".gz" else p.read_bytes()[:4096]
        if b'"traceEvents"' in head or b'"ph"' in head:
            traces.add(str(p.relative_to(DATA)))
    assert traces and traces <= set(GOLDEN), sorted(traces - set(GOLDEN))


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_committed_traces_read_as_before(name):
    assert read_digest(DATA / name) == GOLDEN[name]


SMALL = "torch/kineto_resnet18_fp16.json.gz"  # KINETO, a GPU trace with ranges
CPU = "torch/cpu_resnet18_fp32.json.gz"  # a CPU-only trace: operators' self times


@pytest.mark.parametrize("chunk", [1, 7, 4096])
@pytest.mark.parametrize(
    "name", [SMALL, CPU, "where/host_sync_train-fp32-eager-torch/trace.json.gz"]
)
def test_any_chunk_size_reads_the_same(monkeypatch, tmp_path, name, chunk):
    """Chunks end anywhere (inside a number, a string, an escape, between an event and its
    comma): the trace reads the same, gzipped or plain."""
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.decompress((DATA / name).read_bytes()))
    monkeypatch.setattr(kineto._Text, "CHUNK", chunk)
    assert read_digest(DATA / name) == GOLDEN[name]
    assert read_digest(plain) == GOLDEN[name]


def test_text_held_is_bounded(monkeypatch):
    """The reader holds a chunk and the event it is in, never the trace's text."""
    text = gzip.decompress((DATA / SMALL).read_bytes())
    longest = max(len(json.dumps(e)) for e in json.loads(text)["traceEvents"])
    held = []
    more = kineto._Text._more

    def watched(self, at_least=0):
        got = more(self, at_least)
        held.append(len(self.buf))
        return got

    monkeypatch.setattr(kineto._Text, "CHUNK", 4096)
    monkeypatch.setattr(kineto._Text, "_more", watched)
    assert read_digest(DATA / SMALL) == GOLDEN[SMALL]
    assert len(held) > 50 and max(held) <= 2 * (4096 + 2 * longest) < len(text) // 10


def _trace() -> dict:
    return json.loads(gzip.decompress(KINETO.read_bytes()))


def test_top_level_entries_anywhere(tmp_path):
    """deviceProperties (the GPU's name) after traceEvents, or entries of any kind around them."""
    trace = _trace()
    events = trace.pop("traceEvents")
    moved = tmp_path / "moved.json"
    moved.write_text(
        json.dumps({"traceEvents": events, "extra": {"a": [1, {"b": "]},["}]}, **trace})
    )
    assert read_digest(moved) == GOLDEN[SMALL]
    spaced = tmp_path / "spaced.json"
    spaced.write_text(
        json.dumps({"x": "traceEvents", **trace, "traceEvents": events}, indent=3) + "\n\n"
    )
    assert read_digest(spaced) == GOLDEN[SMALL]


def test_bare_event_list(tmp_path):
    """A file that is the list of events alone reads as a trace with no deviceProperties."""
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(_trace()["traceEvents"]))
    c = read_kineto(bare)
    assert c.gpu_name is None and sum(1 for _ in c.rows) == sum(1 for _ in read_kineto(KINETO).rows)


def _text() -> str:
    return gzip.decompress(KINETO.read_bytes()).decode()


def _middle(text: str) -> int:
    """Where the middle event of the trace's traceEvents begins."""
    start = text.index('"traceEvents"')
    return text.rindex("{", 0, text.index('"ph"', start + (len(text) - start) // 2))


def _write(tmp: Path, name: str, text: str, zipped: bool = False) -> Path:
    path = tmp / name
    path.write_bytes(gzip.compress(text.encode()) if zipped else text.encode())
    return path


BAD = {
    "truncated mid-event": (lambda t: t[: _middle(t) + 40], "not a readable JSON trace"),
    "truncated between events": (lambda t: t[: _middle(t) - 2], "not a readable JSON trace"),
    "garbage byte in traceEvents": (
        lambda t: t[: _middle(t)] + "\x07" + t[_middle(t) :],
        "not a readable JSON trace",
    ),
    "garbage inside an event": (
        lambda t: t[: _middle(t) + 10] + "@" + t[_middle(t) + 10 :],
        "not a readable JSON trace",
    ),
    "no comma between events": (
        lambda t: t[: t.rindex(",", 0, _middle(t))] + t[t.rindex(",", 0, _middle(t)) + 1 :],
        "Expecting ',' delimiter",
    ),
    "comma after the last event": (
        lambda t: t[: t.rindex("]")] + ",]" + t[t.rindex("]") + 1 :],
        "not a readable JSON trace",
    ),
    "data after the trace": (lambda t: t + ' {"traceEvents": []}', "Extra data"),
    "traceEvents an object": (
        lambda t: json.dumps({**json.loads(t), "traceEvents": {"x": []}}),
        "not a Chrome/Kineto trace (no traceEvents list)",
    ),
    "traceEvents a string": (
        lambda t: json.dumps({**json.loads(t), "traceEvents": "[]"}),
        "not a Chrome/Kineto trace (no traceEvents list)",
    ),
    "traceEvents twice": (
        lambda t: t.rstrip()[:-1] + ', "traceEvents": []}',
        "has more than one traceEvents entry",
    ),
    "a JSON number": (lambda t: "12", "not a Chrome/Kineto trace"),
    "empty": (lambda t: "", "not a readable JSON trace"),
    "a kernel named 5 mid-stream": (
        lambda t: t[: _middle(t)] + '{"ph": "X", "cat": "kernel", "name": 5}, ' + t[_middle(t) :],
        "name is 5, not a string",
    ),
}


@pytest.mark.parametrize("zipped", [False, True])
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_trace_is_one_line_and_stores_nothing(seeded, tmp_path, case, zipped):  # noqa: F811
    edit, message = BAD[case]
    path = _write(tmp_path, "bad.json.gz" if zipped else "bad.json", edit(_text()), zipped)
    before = digest(seeded)
    one_line_error(cli("import", path, db=seeded), message)
    unchanged(seeded)
    assert digest(seeded) == before


def test_error_says_where(tmp_path):
    """A JSON error deep in a trace is placed by its character in the whole text, not in a chunk."""
    text = _text()
    at = _middle(text) + 10
    path = _write(tmp_path, "bad.json", text[:at] + "@" + text[at:])
    with pytest.raises(BadExport, match=f"at character {at:,}"):
        read_kineto(path)


def test_truncated_gzip_is_one_line(seeded, tmp_path):  # noqa: F811
    """A gzip stream cut short, mid-way through the events."""
    data = KINETO.read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    one_line_error(cli("import", path, db=seeded), "not a readable JSON trace")
    unchanged(seeded)
