"""A program's window against the same model as a workload file (issue 35): for every kernel
function both launched, the verdicts (precision, tensor cores) their launches got, and the
share of each run's kernel time that is attributed to a module.

Usage: python benchmarks/program_verdicts.py DB PROGRAM_RUN WORKLOAD_RUN"""

import sys

import profkit


def verdicts(run):
    k = run.kernels()
    k = k[k.kind == "kernel"]
    return k, {
        name: sorted(set(zip(g.precision.astype(str), g.tensor_core.astype(str))))
        for name, g in k.groupby("name")
    }


def main() -> None:
    db = profkit.open_db(sys.argv[1])
    a, b = db.run(sys.argv[2]), db.run(sys.argv[3])
    ka, va = verdicts(a)
    kb, vb = verdicts(b)
    shared = sorted(set(va) & set(vb))
    differ = [n for n in shared if va[n] != vb[n]]
    share = {
        r.name: float(k[k.module.notna()].duration_ns.sum() / k.duration_ns.sum())
        for r, k in ((a, ka), (b, kb))
    }
    print(
        f"{a.name} vs {b.name}: {len(shared)} kernel functions in both ({len(va)} and {len(vb)} in all), "
        f"{len(differ)} with other verdicts; launches {len(ka)} vs {len(kb)}; "
        f"attributed to a module: {share[a.name]:.1%} vs {share[b.name]:.1%}"
    )
    for n in differ[:10]:
        print(f"  differs: {n[:100]}: {va[n]} vs {vb[n]}")
    only = sorted(set(va) ^ set(vb))
    for n in only[:10]:
        print(f"  only in {'the program' if n in va else 'the workload'}: {n[:120]}")


if __name__ == "__main__":
    main()
