"""torchrun (``torch.distributed.run``) as ``profkit run --nproc-per-node N`` starts it: the same
command line, but it dies with its parent. Under nsys torchrun's parent is nsys's launcher,
and torchrun starts each rank in a session of its own, so a timeout or Ctrl-C that ends nsys's
process group reaches neither: here torchrun gets SIGTERM when its parent goes, and stops its
ranks (which die with it in turn: see ``harness``)."""

from __future__ import annotations

import os
import signal


def main() -> None:
    from .tools.runner import die_with_parent, watch_lifeline

    die_with_parent(os.getppid(), signal.SIGTERM)
    # profkit itself gone (nsys may outlive it)
    watch_lifeline(lambda: os.kill(os.getpid(), signal.SIGTERM))
    from torch.distributed.run import main as torchrun

    torchrun()  # its arguments: this command line's


if __name__ == "__main__":
    main()
