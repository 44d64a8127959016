"""Shared timed loop for the Python workloads of bench/runtimes/.

Each workload builds its data, then calls run(op, checksum, threads): `op` once per iteration,
first for WARMUP seconds (at least two calls, not counted), then for DURATION seconds. It prints

    pool threads: N          the runtime's own pool size as it reports it (0: it does not say)
    process threads: N       the threads the process has at the end (every pool it started)
    throughput: X ops/s      what goset-bench compares (higher is better)
    checksum: C              an integer that must be the same in every run and every mode

goset-bench keys every number by its line's words; these three lines keep the same keys in every
run (no output drift). A workload whose runtime is missing prints `skip: ...` and exits 3; with
`--check` it only says whether it can run (exit 0 or 3).
"""
import os
import sys
import time

SKIP = 3


def duration():
    return float(os.environ.get("DURATION", "2"))


def warmup_s():
    return float(os.environ.get("WARMUP", "0.5"))


def need(module_names, label):
    """Imports the modules, or prints a skip line and exits 3; exits 0 under --check."""
    mods = []
    for name in module_names:
        try:
            mods.append(__import__(name))
        except Exception as e:  # ImportError, or a broken install
            print(f"skip: {label}: cannot import {name} ({type(e).__name__}: {e})")
            sys.exit(SKIP)
    if "--check" in sys.argv[1:]:
        print(f"ok: {label} {getattr(mods[0], '__version__', '')}".rstrip())
        sys.exit(0)
    return mods


def run(op, checksum, threads):
    """Warms up, times `op` for DURATION s, prints pool threads, throughput and checksum."""
    end = time.perf_counter() + warmup_s()
    n = 0
    while n < 2 or time.perf_counter() < end:
        op()
        n += 1
    ops = 0
    start = time.perf_counter()
    stop = start + duration()
    while True:
        op()
        ops += 1
        now = time.perf_counter()
        if now >= stop:
            break
    rate = ops / (now - start)
    c = checksum()
    print(f"pool threads: {int(threads)}")
    print(f"process threads: {len(os.listdir('/proc/self/task'))}")
    print(f"throughput: {rate:.3f} ops/s")
    print(f"checksum: {int(c)}")
    sys.stdout.flush()


def int_matrix(np, n, seed, dtype):
    """An n x n matrix of small integers (0..3) as `dtype`: every product of two is exact in
    fp32 (sums below 2^24), so the checksum does not depend on the blocking or the threads."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 4, size=(n, n)).astype(dtype)
