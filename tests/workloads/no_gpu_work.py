"""A workload whose step launches no GPU kernel: ncu then profiles nothing."""


def build(spec):
    return lambda: None
