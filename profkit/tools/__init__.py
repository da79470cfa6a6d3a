"""One module per profiler: find it, read its version, build its command lines (pure
functions, tested as lists). ``runner`` is the only place that starts a subprocess."""
