"""The markdown table of bench/runtimes/run.sh from goset-bench's JSON files.

    summarize.py OUTDIR CPUS NAME::LABEL[::VERSION] ...

Per workload NAME, OUTDIR/NAME.json (goset-bench --json): the median of each mode's
`throughput`, goset/mask and shim/mask (ratios of medians, higher is better: 1.0 is mask's
throughput), the counted runs per mode, whether every counted run's `checksum` was the same,
and the pool and process threads each mode's runs reported (min-max over runs). A workload with
no JSON (goset-bench failed or timed out) gets a row saying so. Then each mode's median and
spread. Writes the tables on stdout.
"""
import json
import os
import sys

MODES = ("mask", "goset", "shim")


def metric(doc, key):
    for m in doc.get("metrics", []):
        if m.get("key") == key:
            return {r["mode"]: r for r in m.get("modes", [])}
    return {}


def span(modes, mode):
    vals = modes.get(mode, {}).get("values") or []
    if not vals:
        return "-"
    lo, hi = int(min(vals)), int(max(vals))
    return str(lo) if lo == hi else f"{lo}-{hi}"


def row(outdir, cpus, name, label, version):
    what = f"{label} | {version}"
    path = os.path.join(outdir, f"{name}.json")
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        return f"| {what} | - | - | 0 | {cpus} | no results ({type(e).__name__}; see {name}.err) | | |"
    thr = metric(doc, "throughput")
    med = {m: thr[m]["summary"]["median"] for m in MODES if m in thr and thr[m].get("values")}

    def ratio(m):
        if m in med and med.get("mask"):
            return f"{med[m] / med['mask']:.3f}"
        return "-"

    runs = "/".join(str(len(thr.get(m, {}).get("values") or [])) for m in MODES)
    sums = metric(doc, "checksum")
    values = {v for m in MODES for v in (sums.get(m, {}).get("values") or [])}
    check = "equal" if len(values) == 1 else ("none" if not values else f"DIFFER ({len(values)} values)")
    pool, proc = metric(doc, "pool threads"), metric(doc, "process threads")
    threads = " / ".join(
        f"{span(pool, m)}" + (f" ({span(proc, m)})" if proc else "") for m in MODES
    )
    mask = f"{med['mask']:.4g}" if "mask" in med else "-"
    notes = []
    discarded = sum(1 for r in doc.get("runs", []) if r.get("discarded") and not r.get("warmup"))
    if discarded:
        notes.append(f"{discarded} runs discarded")
    if doc.get("warnings"):
        notes.append(f"{len(doc['warnings'])} warnings")
    check += (", " + ", ".join(notes)) if notes else ""
    return f"| {what} | {ratio('goset')} | {ratio('shim')} | {runs} | {cpus} | {mask} | {check} | {threads} |"


def spreads(outdir, name, label):
    """One row of the per-mode table: each mode's median throughput and spread, and the seed."""
    try:
        with open(os.path.join(outdir, f"{name}.json")) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    thr = metric(doc, "throughput")
    cells = []
    for m in MODES:
        s = thr.get(m, {}).get("summary")
        cells.append(f"{s['median']:.4g} ({100 * s['spread']:.0f}%)" if s and thr[m].get("values") else "-")
    return f"| {label} | " + " | ".join(cells) + f" | {doc.get('experiment', {}).get('seed', '-')} |"


def main():
    outdir, cpus, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
    print("| runtime | version | goset/mask | shim/mask | runs (mask/goset/shim) | CPUs | mask ops/s | checksums | pool (process) threads, mask / goset / shim |")
    print("|---|---|---|---|---|---|---|---|---|")
    for spec in specs:
        name, label, version = (spec.split("::", 2) + ["", ""])[:3]
        print(row(outdir, cpus, name, label or name, version))
    print()
    print("Each mode's median throughput (ops/s) and spread ((max - min) / median) over its counted runs; goset-bench's seed repeats the order of the modes:")
    print()
    print("| runtime | mask | goset | shim | seed |")
    print("|---|---|---|---|---|")
    for spec in specs:
        name, label = (spec.split("::", 2) + [""])[:2]
        line = spreads(outdir, name, label or name)
        if line:
            print(line)


if __name__ == "__main__":
    main()
