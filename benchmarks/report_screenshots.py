"""Screenshots of profkit's HTML reports, made from the committed real captures, as a person
sees them: headless Chromium (tests/chromium.py), 1400 px wide, whole page.

    python benchmarks/report_screenshots.py [--out benchmarks/screenshots]

Writes <out>/<name>.jpg and the reports themselves under a temporary folder:
  ncu_mnv2_fp16     ncu run, MobileNetV2 fp16 (counters, throughput, depthwise finding)
  nsys_r50_fp16     nsys run, ResNet-50 fp16 batch 64 (timeline of one iteration)
  nsys_train_amp    nsys run, a ResNet-18 AMP training step (two threads, several streams)
  cpu_r18_fp32      CPU run under torch.profiler (operators, labelled as such)
  vs_eager_ts       ResNet-18 fp16 eager against TorchScript under ncu, side by side
  vs_eager_compile  ResNet-18 fp16 eager against torch.compile under torch.profiler, by family
  kernel_open       the ncu report's table sorted by launches, filtered, one group opened
  index             the index of those runs
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import profkit  # noqa: E402
from tests import chromium  # noqa: E402

DATA = ROOT / "tests" / "data"


def plain(path: Path, tmp: Path) -> Path:
    """nsys SQLite exports are committed gzipped; the importer reads plain files."""
    if path.name.endswith(".sqlite.gz"):
        out = tmp / path.name[:-3]
        out.write_bytes(gzip.decompress(path.read_bytes()))
        return out
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "screenshots")
    a = ap.parse_args()
    if chromium.available():
        raise SystemExit(chromium.available())
    a.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="profkit-shots-"))
    db = profkit.open_db(tmp / "shots.db")
    files = {
        "mnv2_fp16_ncu": DATA / "report" / "mnv2_fp16_ncu.raw.csv.gz",
        "r50_fp16_b64_nsys": DATA / "report" / "r50_fp16_b64_nsys.sqlite.gz",
        "r18_train_amp_nsys": DATA / "nsys" / "nsys_resnet18_train_amp.sqlite.gz",
        "r18_fp32_cpu": DATA / "torch" / "cpu_resnet18_fp32.json.gz",
        "r18_fp16_eager_ncu": DATA / "diff" / "r18_fp16_eager_ncu.raw.csv.gz",
        "r18_fp16_torchscript_ncu": DATA / "diff" / "r18_fp16_torchscript_ncu.raw.csv.gz",
        "r18_fp16_eager_torch": DATA / "diff" / "r18_fp16_eager_torch.json.gz",
        "r18_fp16_compile_torch": DATA / "diff" / "r18_fp16_compile_torch.json.gz",
    }
    runs = {k: db.import_file(plain(f, tmp), name=k) for k, f in files.items()}
    pages = {
        "ncu_mnv2_fp16": runs["mnv2_fp16_ncu"].report(tmp / "ncu.html"),
        "nsys_r50_fp16": runs["r50_fp16_b64_nsys"].report(tmp / "nsys.html"),
        "nsys_train_amp": runs["r18_train_amp_nsys"].report(tmp / "train.html"),
        "cpu_r18_fp32": runs["r18_fp32_cpu"].report(tmp / "cpu.html"),
        "vs_eager_ts": runs["r18_fp16_eager_ncu"].report(
            tmp / "vs_ts.html", vs=runs["r18_fp16_torchscript_ncu"]
        ),
        "vs_eager_compile": runs["r18_fp16_eager_torch"].report(
            tmp / "vs_compile.html", vs=runs["r18_fp16_compile_torch"], match="family"
        ),
        "index": db.write_index(tmp / "index.html"),
    }
    with chromium.browser() as b:
        for name, path in pages.items():
            opened = chromium.open_report(b, path)
            if opened.errors or opened.dialogs or opened.requests:
                raise SystemExit(f"{name}: {opened.errors or opened.dialogs or opened.requests}")
            opened.page.screenshot(
                path=str(a.out / f"{name}.jpg"), full_page=True, type="jpeg", quality=60
            )
            print(f"{name}: loaded in {opened.load_s:.2f} s -> {a.out / (name + '.jpg')}")
        page = chromium.open_report(b, pages["ncu_mnv2_fp16"]).page
        page.click('#kernel-table th[data-key="launches"]')
        page.fill("#kernel-table input.filter-text", "conv")
        page.wait_for_function(
            "() => document.querySelector('#kernel-table .table-info').textContent.includes('match')"
        )
        page.click("#kernel-table tbody tr.row >> nth=0")
        page.locator("#kernels").screenshot(
            path=str(a.out / "kernel_open.jpg"), type="jpeg", quality=60
        )
        print(f"kernel_open -> {a.out / 'kernel_open.jpg'}")


if __name__ == "__main__":
    main()
