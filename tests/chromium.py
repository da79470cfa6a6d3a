"""Open profkit's HTML reports in a real headless Chromium (Debian's ``chromium``, driven by
Playwright without a browser download), for the report tests and benchmarks/report_*.py.

``available()`` says why not where there is no Chromium or no Playwright; ``browser()`` starts
one with the flags a closed network needs; ``open_report()`` loads a file and waits until the
page's script says it is ready, collecting script errors and dialogs on the way.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Without the background-networking flags Chromium keeps trying hosts this machine cannot reach.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def executable() -> str | None:
    return (
        os.environ.get("PROFKIT_CHROMIUM")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )


def available() -> str | None:
    """None when reports can be opened here, else why not."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if executable() is None:
        return "no Chromium on PATH (Debian: apt-get install chromium)"
    return None


@contextmanager
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable(), args=FLAGS)
        try:
            yield b
        finally:
            b.close()


@dataclass
class Opened:
    page: Any
    load_s: float  # navigation start to the page's script being done
    errors: list[str] = field(default_factory=list)  # uncaught exceptions and console errors
    dialogs: list[str] = field(default_factory=list)  # alert()/confirm()/prompt() the page opened
    requests: list[str] = field(default_factory=list)  # anything fetched beside the file itself


def open_report(b: Any, path: Path, width: int = 1400, height: int = 900) -> Opened:
    page = b.new_page(viewport={"width": width, "height": height})
    opened = Opened(page, 0.0)
    page.on("pageerror", lambda e: opened.errors.append(f"pageerror: {e}"))
    page.on(
        "console",
        lambda m: opened.errors.append(f"console: {m.text}") if m.type == "error" else None,
    )
    page.on("dialog", lambda d: (opened.dialogs.append(d.message), d.dismiss()))
    url = Path(path).resolve().as_uri()
    page.on("request", lambda r: opened.requests.append(r.url) if r.url != url else None)
    start = time.perf_counter()
    page.goto(url)
    page.wait_for_selector("body[data-ready], body[data-error]", state="attached", timeout=60_000)
    opened.load_s = time.perf_counter() - start
    return opened


def ready_page(b: Any, path: Path, height: int = 900, width: int = 1400) -> Any:
    """A report opened in ``b`` that raised no error, dialog or request and finished drawing."""
    o = open_report(b, path, width=width, height=height)
    assert o.errors == [] and o.dialogs == [] and o.requests == []
    assert o.page.get_attribute("body", "data-ready") == "1"
    return o.page
