"""profkit: run a PyTorch workload under a GPU profiler, keep one kernel table per run, and say
for every kernel which precision it ran in and whether it used the tensor cores.

The library is the product; ``profkit.cli`` is a thin shell over it. Importing this package
must stay cheap (no torch, no pandas) so that ``profkit --help`` is instant.
"""

__version__ = "0.1.0"
