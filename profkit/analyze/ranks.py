"""A distributed run's ranks side by side (``profkit run --nproc-per-node N``): per rank its
GPU time and its communication (NCCL kernels) with how much of it overlapped compute kernels
on the same GPU; per measured iteration the skew between the ranks and who waited for whom;
and whether any rank launched other kernels, or the same ones in other precisions, than
rank 0.

Everything reads the kernel table's ``rank`` column and the ranges' (``Store.rank_*``):
aggregates in SQL, and one streamed pass over the kernels' start times for the overlap.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Sequence

from ..parse.schema import RangeRow
from ..records import IterationSkew, RankDifference, RankFigures, RankIteration, RankReport, RunRecord
from ..store import Store
from .ranges import iteration_ranges, run_ranges

COMM = "communication"  # the family of NCCL kernels and collective operators (rules.toml)


def world_size(run: RunRecord) -> int:
    """How many ranks a run had (1 for a single process)."""
    value = run.info.world_size
    return value if isinstance(value, int) and value > 1 else 1


def rank_report(store: Store, run: RunRecord) -> RankReport | None:
    """The run's per-rank figures; None for a run of one process."""
    size = world_size(run)
    if size <= 1:
        return None
    activity = run.activity
    totals = store.rank_totals(run.id, activity, COMM)
    ranges = run_ranges(store, run)
    path_times = store.rank_path_times(run.id, activity, COMM)
    overlap = _overlaps(store.rank_intervals(run.id, COMM)) if activity == "kernel" else {}
    cpu_comm = _cpu_collectives(ranges) if activity == "cpu_op" else {}
    figures = []
    for t in totals:
        comm_n, comm = cpu_comm.get(t["rank"], (0, 0)) if activity == "cpu_op" else (t["family_kernels"], t["family_ns"])
        over = overlap.get(t["rank"])
        figures.append(RankFigures(
            rank=t["rank"], devices=t["devices"], kernels=t["kernels"], gpu_time_ns=t["time_ns"],
            comm_kernels=comm_n, comm_time_ns=comm, compute_time_ns=t["time_ns"] - t["family_ns"],
            comm_overlap_ns=over, comm_overlap_pct=round(100.0 * over / comm, 1) if over is not None and comm else None))
    notes = []
    seen = {f.rank for f in figures}
    missing = [r for r in range(size) if r not in seen]
    if missing:
        notes.append(f"no {'kernels' if activity == 'kernel' else 'operators'} from rank "
                     f"{', '.join(map(str, missing))} of {size}")
    if figures and not any(f.comm_kernels for f in figures):
        notes.append("no rank launched communication kernels (NCCL) or collective operators: does the workload wrap "
                     "its model in DistributedDataParallel (profkit.steps.data_parallel)?")
    differences = _differences(store.rank_name_counts(run.id, activity), range(size))
    iterations = _iterations(ranges, path_times, cpu=activity == "cpu_op")
    return RankReport(world_size=size, activity=activity, ranks=figures, iterations=iterations,
                      differences=differences, same_kernels=not differences, notes=notes)


# On the CPU the collectives' work runs on gloo's own threads, inside ranges torch.profiler
# records (``gloo:all_reduce``); the c10d operators only hand it over.
CPU_COLLECTIVE_PREFIXES = ("gloo:", "nccl:")


def _collective(r: RangeRow) -> bool:
    return (r["name"] or "").startswith(CPU_COLLECTIVE_PREFIXES) and r.get("rank") is not None


def _cpu_collectives(ranges: Sequence[RangeRow]) -> dict[int, tuple[int, int]]:
    """Per rank of a CPU run: how many collective ranges, and their summed wall time."""
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for r in ranges:
        if _collective(r):
            cell = out[int(r["rank"])]  # type: ignore[arg-type]
            cell[0] += 1
            cell[1] += r["wall_ns"] or 0
    return {k: (v[0], v[1]) for k, v in out.items()}


# ---------------------------------------------------------------------------------- overlap
def _overlaps(intervals: Iterable[tuple[int, int | None, int, int, bool]]) -> dict[int, int]:
    """Per rank: the time its communication kernels ran while a compute kernel ran on the same
    device, from (rank, device, start, duration, is_comm) ordered by rank, device, start."""
    out: dict[int, int] = defaultdict(int)
    key: tuple[int, int | None] | None = None
    comm: list[list[int]] = []
    compute: list[list[int]] = []

    def close() -> None:
        if key is not None:
            out[key[0]] += _intersection(comm, compute)

    for rank, device, start, duration, is_comm in intervals:
        if (rank, device) != key:
            close()
            key, comm, compute = (rank, device), [], []
        _extend(comm if is_comm else compute, start, start + duration)
    close()
    return dict(out)


def _extend(union: list[list[int]], start: int, end: int) -> None:
    """Add [start, end) to a union of intervals built in start order."""
    if union and start <= union[-1][1]:
        union[-1][1] = max(union[-1][1], end)
    else:
        union.append([start, end])


def _intersection(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> int:
    """Total length of the intersection of two sorted unions of disjoint intervals."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


# ---------------------------------------------------------------------------------- iterations
def iteration_skew(ranges: Sequence[RangeRow]) -> list[IterationSkew]:
    """Each measured iteration across the ranks from the ranges alone (start and end skew):
    what ``profkit ranges`` shows. Kernel counts and times are the ranges' own."""
    return _iterations(ranges, None)


def _iterations(ranges: Sequence[RangeRow], path_times: list[dict[str, Any]] | None,
                cpu: bool = False) -> list[IterationSkew]:
    per_iter: dict[str, dict[int, RangeRow]] = defaultdict(dict)
    for r in iteration_ranges(ranges):
        if r.get("rank") is not None:
            per_iter[r["name"]].setdefault(int(r["rank"]), r)  # type: ignore[arg-type]
    by_rank_iter: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    if cpu:  # communication: the collective ranges that started inside the rank's iteration
        for c in ranges:
            at, rank = c["start_ns"], c.get("rank")
            if not _collective(c) or at is None or rank is None:
                continue
            for name, rows in per_iter.items():
                window = rows.get(rank)
                begin = window["start_ns"] if window else None
                if window and begin is not None and begin <= at < begin + (window["wall_ns"] or 0):
                    by_rank_iter[(rank, name)][2] += c["wall_ns"] or 0
    if path_times is not None:
        names = set(per_iter)
        for p in path_times:
            iteration = _iteration_of(p["nvtx_path"], names)
            if iteration is not None:
                cell = by_rank_iter[(p["rank"], iteration)]
                cell[0] += p["kernels"]
                cell[1] += p["time_ns"]
                if not cpu:
                    cell[2] += p["family_ns"]
    out = []
    for name in sorted(per_iter, key=lambda n: min(r["start_ns"] or 0 for r in per_iter[n].values())):
        rows = per_iter[name]
        parts = []
        for rank in sorted(rows):
            r = rows[rank]
            kernels, time_ns, comm_ns = by_rank_iter.get((rank, name), [r["kernels"], r["gpu_time_ns"], 0]) \
                if path_times is not None else (r["kernels"], r["gpu_time_ns"], 0)
            parts.append(RankIteration(rank=rank, start_ns=r["start_ns"], wall_ns=r["wall_ns"], kernels=kernels,
                                       gpu_time_ns=time_ns, comm_time_ns=comm_ns))
        starts = [p.start_ns for p in parts if p.start_ns is not None]
        ends = [p.start_ns + p.wall_ns for p in parts if p.start_ns is not None and p.wall_ns is not None]
        waited_for = wait = None
        if path_times is not None and len(parts) > 1 and any(p.comm_time_ns for p in parts):
            least = min(parts, key=lambda p: (p.comm_time_ns, p.rank))
            most = max(parts, key=lambda p: (p.comm_time_ns, -p.rank))
            waited_for, wait = least.rank, most.comm_time_ns - least.comm_time_ns
        out.append(IterationSkew(
            iteration=name, start_skew_ns=max(starts) - min(starts) if len(starts) > 1 else None,
            end_skew_ns=max(ends) - min(ends) if len(ends) > 1 else None, waited_for=waited_for, wait_ns=wait,
            ranks=parts))
    return out


def _iteration_of(path: str | None, names: set[str]) -> str | None:
    """The iteration range a launch was made in, from its NVTX path (``domain@name`` parts)."""
    for part in (path or "").split("/"):
        name = part.split("@", 1)[1] if "@" in part else part
        if name in names:
            return name
    return None


# ---------------------------------------------------------------------------------- differences
def _differences(counts: Iterable[tuple[int, str, str, int]], ranks: Iterable[int] = ()) -> list[RankDifference]:
    """How each rank's (name, precision) launch counts differ from the lowest rank's; ``ranks``
    that launched nothing at all differ by everything."""
    per_rank: dict[int, dict[tuple[str, str], int]] = defaultdict(dict)
    for rank in ranks:
        per_rank[rank] = {}
    for rank, name, precision, n in counts:
        per_rank[rank][(name, precision)] = n
    if not any(per_rank.values()):
        return []
    base_rank = min(per_rank)
    base = per_rank[base_rank]
    out = []
    for rank in sorted(per_rank):
        if rank == base_rank:
            continue
        mine = per_rank[rank]
        kernels = [{"name": name, "precision": p, "launches": mine.get((name, p), 0), "vs_launches": base.get((name, p), 0)}
                   for name, p in sorted(set(mine) | set(base)) if mine.get((name, p), 0) != base.get((name, p), 0)]
        precisions = []
        for name in sorted({n for n, _ in mine} & {n for n, _ in base}):
            here = sorted(p for n, p in mine if n == name)
            there = sorted(p for n, p in base if n == name)
            if here != there:
                precisions.append({"name": name, "precisions": here, "vs_precisions": there})
        if kernels or precisions:
            out.append(RankDifference(rank=rank, vs=base_rank, kernels=kernels, precisions=precisions))
    return out
