"""Facts about this machine's processes, shared by the subprocess runner (``tools.runner``)
and the store (whose runs' owners may be gone)."""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine is running (a zombie, ended but not yet reaped,
    is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (not Linux): alive, as kill says
