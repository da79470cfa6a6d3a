"""A workload file that fails while it is imported, as a user's file with a bad setting might."""

SETTINGS = {"hidden": 64}
WIDTH = SETTINGS["width"]  # the key is "hidden": a KeyError at import


def build(spec):
    raise AssertionError("never reached")
