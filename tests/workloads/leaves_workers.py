"""A small model whose build leaves a worker process running (as a DataLoader's workers do)
when the env says so, whose atexit handler marks that its exit handlers ran, and whose model
marks that Python's teardown collected it (``.teardown``): the harness ends at once only where
nothing of the workload's is left (profkit.process.common.alone). It also leaves a log file open
(``.log``) and prints through the C library: both must be written out however it ends."""

import atexit
import ctypes
import multiprocessing
import os
import time


def _sleep() -> None:
    time.sleep(120)


def build(spec):
    import torch

    marker = os.environ["PROFKIT_TEST_MARKER"]
    atexit.register(lambda: open(marker, "w").write("normal exit"))
    if os.environ.get("PROFKIT_TEST_WORKER"):
        worker = multiprocessing.get_context("fork").Process(target=_sleep, daemon=True)
        worker.start()
        with open(marker + ".pid", "w") as f:
            f.write(str(worker.pid))
    class Collected(torch.nn.Sequential):
        def __del__(self):
            open(marker + ".teardown", "w").write("collected")

    model = Collected(torch.nn.Linear(16, 16))
    model.log = open(marker + ".log", "w")  # never closed
    model.log.write("built\n")
    if os.environ.get("PROFKIT_TEST_GZIP"):  # never closed: only closing writes its trailer
        import gzip

        model.gz = gzip.open(marker + ".gz", "wb")
        model.gz.write(b"built\n")
    ctypes.CDLL(None).printf(b"printed by C\n")
    return model, (torch.randn(spec.batch_size, 16),)
