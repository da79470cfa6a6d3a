"""A workload whose build fails, as a user's file might."""


def build(spec):
    raise RuntimeError("weights file missing")
