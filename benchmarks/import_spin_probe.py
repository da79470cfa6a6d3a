"""Which module, imported on a thread, leaves a thread of the process busy afterwards: each
module imported (on a thread, as profkit imports the export's readers while nsys exports) in a
fresh process, then the process's CPU over 2 s of sleep, and its threads' names and CPU
(/proc/self/task). Run: python3 benchmarks/import_spin_probe.py"""

import subprocess
import sys

CHILD = r"""
import importlib, os, sys, threading, time
name, on_thread = sys.argv[1], sys.argv[2] == "1"
def load():
    importlib.import_module(name)
if on_thread:
    t = threading.Thread(target=load); t.start(); t.join()
else:
    load()
def tasks():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        out[tid] = (comm, int(parts[11]) + int(parts[12]))
    return out
a, c0 = tasks(), time.process_time()
time.sleep(2)
b, c1 = tasks(), time.process_time()
busy = [f"{b[t][0]}:{b[t][1] - a.get(t, ('', 0))[1]}" for t in b if b[t][1] - a.get(t, ('', 0))[1] > 5]
print(f"{name:32s} thread={int(on_thread)} cpu over 2 s sleep {c1 - c0:.2f} s, threads {len(b)}, busy (ticks) {busy}")
"""
for name in sys.argv[1:] or [
    "numpy",
    "pyarrow",
    "pandas",
    "adbc_driver_manager",
    "adbc_driver_sqlite.dbapi",
    "profkit.store.nsys_columns",
    "profkit.parse.nsys_sqlite",
]:
    for on_thread in ("0", "1"):
        subprocess.run([sys.executable, "-c", CHILD, name, on_thread], check=False)
