"""A workload that ignores SIGINT and never finishes building: what a hung model, or one whose
code swallows Ctrl-C, looks like to profkit. profkit must still stop it (SIGKILL of its group
after the grace period) and leave nothing running."""


def build(spec):
    import signal
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        time.sleep(1)
