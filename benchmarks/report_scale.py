"""Size and render time of the HTML report of a 100,000-launch run.

    python benchmarks/report_scale.py [--kernels 100000] [--workdir /tmp/report-scale]

The run is a real Nsight Systems capture replicated to size (benchmarks/nsys_scale.py's
``synthesize``: tests/data/nsys/nsys_resnet18_train_amp.sqlite.gz, timestamps and correlation
ids shifted per copy). Measures `profkit report` (wall time, peak RSS), the file's size, and in
headless Chromium (tests/chromium.py): the time from navigation to the page's script being done
(table and charts drawn), the time to sort the kernel table and to filter it, and the JS heap.
Prints one JSON object for benchmarks/RESULTS.md and saves a screenshot beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]

from nsys_scale import synthesize, timed  # noqa: E402

from tests import chromium  # noqa: E402


def in_browser(path: Path, shot: Path | None, repeat: int = 3) -> dict:
    loads, sorts, filters, heap = [], [], [], 0
    with chromium.browser() as b:
        for i in range(repeat):
            opened = chromium.open_report(b, path)
            page = opened.page
            if opened.errors or opened.dialogs or opened.requests:
                raise SystemExit(
                    f"the page misbehaved: {opened.errors or opened.dialogs or opened.requests}"
                )
            loads.append(opened.load_s)
            t0 = time.perf_counter()
            page.click('#kernel-table th[data-key="launches"]')
            page.wait_for_selector('#kernel-table th[data-key="launches"][aria-sort="descending"]')
            sorts.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            page.fill("#kernel-table input.filter-text", "conv")
            page.wait_for_function(
                "() => document.querySelector('#kernel-table .table-info').textContent.includes('match')"
            )
            filters.append(time.perf_counter() - t0)  # includes the 120 ms typing debounce
            heap = page.evaluate("() => performance.memory ? performance.memory.usedJSHeapSize : 0")
            if i == 0 and shot is not None:
                page.fill("#kernel-table input.filter-text", "")
                page.wait_for_timeout(300)
                page.screenshot(path=str(shot), full_page=True, type="jpeg", quality=60)
            page.close()
    return {
        "load_s": [round(x, 2) for x in loads],
        "load_median_s": round(statistics.median(loads), 2),
        "sort_median_s": round(statistics.median(sorts), 3),
        "filter_median_s": round(statistics.median(filters), 3),
        "js_heap_mb": round(heap / 1e6, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", type=int, default=100_000)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/report-scale"))
    ap.add_argument(
        "--screenshot", type=Path, default=ROOT / "benchmarks" / "screenshots" / "report_100k.jpg"
    )
    a = ap.parse_args()
    if chromium.available():
        raise SystemExit(chromium.available())
    shutil.rmtree(a.workdir, ignore_errors=True)
    a.workdir.mkdir(parents=True)
    big, db, html = a.workdir / "synthetic.sqlite", a.workdir / "bench.db", a.workdir / "big.html"
    result = {
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
    }
    result["capture"] = synthesize(big, a.kernels)
    profkit = [sys.executable, "-m", "profkit", "--db", str(db)]
    result["import"] = timed([*profkit, "import", str(big), "--name", "big"])
    result["report"] = timed([*profkit, "report", "big", "-o", str(html)])
    result["report_mb"] = round(html.stat().st_size / 1e6, 2)
    result["chromium"] = in_browser(html, a.screenshot)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
