"""The profiled process: what profkit starts under a profiler, and the files it and profkit
exchange.

- :mod:`.job`: the job file profkit writes and the process reads, the info and error files it
  writes back, each rank's names for them, and the process's start (watching its profkit, a
  rank's files): typed, in one place.
- :mod:`.record`: how a window of steps is profiled, one class a way (torch.profiler; nsys's
  capture range; ncu's NVTX filter; CUPTI's timer of every launch, then the Range Profiler's
  counts), chosen in one place (:func:`.record.recorder`) for both kinds of process.
- :mod:`.common`: what both kinds share: the machine's description, the GPU's turn between two
  processes, the error a process reports, its end.

What runs there is chosen by profkit (``launch._Job.process_module``): a workload file's
``build(spec)`` (``profkit.harness``) or a user's program as it is (``profkit.program``).
Nothing here imports torch at the top.
"""
