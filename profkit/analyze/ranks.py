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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..parse.schema import RangeRow
from ..records import (
    IterationSkew,
    LaunchCountDifference,
    PrecisionDifference,
    RankDifference,
    RankFigures,
    RankIteration,
    RankReport,
    RunRecord,
)
from ..rows import RankPathTime
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
        comm_n, comm = (
            cpu_comm.get(t.rank, (0, 0))
            if activity == "cpu_op"
            else (t.family_kernels, t.family_ns)
        )
        over = overlap.get(t.rank)
        figures.append(
            RankFigures(
                rank=t.rank,
                devices=t.devices,
                kernels=t.kernels,
                gpu_time_ns=t.time_ns,
                comm_kernels=comm_n,
                comm_time_ns=comm,
                compute_time_ns=t.time_ns - t.family_ns,
                comm_overlap_ns=over,
                comm_overlap_pct=round(100.0 * over / comm, 1)
                if over is not None and comm
                else None,
            )
        )
    notes = []
    seen = {f.rank for f in figures}
    missing = [r for r in range(size) if r not in seen]
    if missing:
        notes.append(
            f"no {'kernels' if activity == 'kernel' else 'operators'} from rank "
            f"{', '.join(map(str, missing))} of {size}"
        )
    if figures and not any(f.comm_kernels for f in figures):
        notes.append(
            "no rank launched communication kernels (NCCL) or collective operators: does the workload wrap "
            "its model in DistributedDataParallel (profkit.steps.data_parallel)?"
        )
    differences = _differences(store.rank_name_counts(run.id, activity), range(size))
    iterations = _iterations(ranges, path_times, cpu=activity == "cpu_op")
    return RankReport(
        world_size=size,
        activity=activity,
        ranks=figures,
        iterations=iterations,
        differences=differences,
        same_kernels=not differences,
        notes=notes,
    )


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


@dataclass
class _Measured:
    """One rank's part of one iteration as its kernels tell it (the accumulator of
    :func:`_measured`)."""

    kernels: int = 0
    time_ns: int = 0
    comm_ns: int = 0


def _iterations(
    ranges: Sequence[RangeRow], path_times: list[RankPathTime] | None, cpu: bool = False
) -> list[IterationSkew]:
    """Each measured iteration across the ranks, in start order: from the ranges alone where
    ``path_times`` is None, else with each rank's kernels, time and communication inside it
    (and who waited for whom)."""
    windows = _iteration_windows(ranges)
    measured = _measured(ranges, windows, path_times, cpu) if path_times is not None else None
    order = sorted(windows, key=lambda n: min(r["start_ns"] or 0 for r in windows[n].values()))
    return [_skew(name, windows[name], measured) for name in order]


def _iteration_windows(ranges: Sequence[RangeRow]) -> dict[str, dict[int, RangeRow]]:
    """Per measured iteration (by name), each rank's range of it (the first met)."""
    out: dict[str, dict[int, RangeRow]] = defaultdict(dict)
    for r in iteration_ranges(ranges):
        if r.get("rank") is not None:
            out[r["name"]].setdefault(int(r["rank"]), r)  # type: ignore[arg-type]
    return out


def _measured(
    ranges: Sequence[RangeRow],
    windows: dict[str, dict[int, RangeRow]],
    path_times: list[RankPathTime],
    cpu: bool,
) -> dict[tuple[int, str], _Measured]:
    """Per (rank, iteration): the kernels launched in the iteration's NVTX stack, their time,
    and the communication: the communication family's kernel time on GPUs, on the CPU the
    wall time of the collective ranges that started inside the rank's iteration."""
    out: dict[tuple[int, str], _Measured] = defaultdict(_Measured)
    if cpu:
        for c in ranges:
            at, rank = c["start_ns"], c.get("rank")
            if not _collective(c) or at is None or rank is None:
                continue
            for name, rows in windows.items():
                if _inside(rows.get(rank), at):
                    out[(rank, name)].comm_ns += c["wall_ns"] or 0
    names = set(windows)
    for p in path_times:
        iteration = _iteration_of(p.nvtx_path, names)
        if iteration is not None:
            cell = out[(p.rank, iteration)]
            cell.kernels += p.kernels
            cell.time_ns += p.time_ns
            if not cpu:
                cell.comm_ns += p.family_ns
    return out


def _inside(window: RangeRow | None, at: int) -> bool:
    """Whether ``at`` falls in the range ``window`` (one with a start)."""
    begin = window["start_ns"] if window else None
    return bool(window and begin is not None and begin <= at < begin + (window["wall_ns"] or 0))


def _skew(
    name: str, rows: dict[int, RangeRow], measured: dict[tuple[int, str], _Measured] | None
) -> IterationSkew:
    """One iteration across the ranks (``rows``: each rank's range of it). Kernel counts and
    times are ``measured``'s where it has the rank's, else the range's own; who waited for
    whom only from ``measured``."""
    parts = []
    for rank in sorted(rows):
        r = rows[rank]
        m = measured.get((rank, name)) if measured is not None else None
        if m is None:
            m = _Measured(r["kernels"], r["gpu_time_ns"], 0)
        parts.append(
            RankIteration(
                rank=rank,
                start_ns=r["start_ns"],
                wall_ns=r["wall_ns"],
                kernels=m.kernels,
                gpu_time_ns=m.time_ns,
                comm_time_ns=m.comm_ns,
            )
        )
    starts = [p.start_ns for p in parts if p.start_ns is not None]
    ends = [
        p.start_ns + p.wall_ns for p in parts if p.start_ns is not None and p.wall_ns is not None
    ]
    waited_for, wait = _who_waited(parts) if measured is not None else (None, None)
    return IterationSkew(
        iteration=name,
        start_skew_ns=max(starts) - min(starts) if len(starts) > 1 else None,
        end_skew_ns=max(ends) - min(ends) if len(ends) > 1 else None,
        waited_for=waited_for,
        wait_ns=wait,
        ranks=parts,
    )


def _who_waited(parts: Sequence[RankIteration]) -> tuple[int | None, int | None]:
    """The rank the others waited for in one iteration (least communication time), and how
    much longer the most-waiting rank spent in communication; None, None where fewer than
    two ranks or no communication."""
    if len(parts) < 2 or not any(p.comm_time_ns for p in parts):
        return None, None
    least = min(parts, key=lambda p: (p.comm_time_ns, p.rank))
    most = max(parts, key=lambda p: (p.comm_time_ns, -p.rank))
    return least.rank, most.comm_time_ns - least.comm_time_ns


def _iteration_of(path: str | None, names: set[str]) -> str | None:
    """The iteration range a launch was made in, from its NVTX path (``domain@name`` parts)."""
    for part in (path or "").split("/"):
        name = part.split("@", 1)[1] if "@" in part else part
        if name in names:
            return name
    return None


# ---------------------------------------------------------------------------------- differences
def _differences(
    counts: Iterable[tuple[int, str, str, int]], ranks: Iterable[int] = ()
) -> list[RankDifference]:
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
        kernels = [
            LaunchCountDifference(name, p, mine.get((name, p), 0), base.get((name, p), 0))
            for name, p in sorted(set(mine) | set(base))
            if mine.get((name, p), 0) != base.get((name, p), 0)
        ]
        precisions = []
        for name in sorted({n for n, _ in mine} & {n for n, _ in base}):
            here = sorted(p for n, p in mine if n == name)
            there = sorted(p for n, p in base if n == name)
            if here != there:
                precisions.append(PrecisionDifference(name, here, there))
        if kernels or precisions:
            out.append(
                RankDifference(rank=rank, vs=base_rank, kernels=kernels, precisions=precisions)
            )
    return out
