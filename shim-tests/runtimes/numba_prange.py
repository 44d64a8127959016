"""numba @njit(parallel=True) prange reduction (one thread per CPU of the mask), for
shim-tests/tests/placement/real_runtimes.rs: about 3 s on 2 CPUs, compiling included. Fixed work
and an exact integer reduction: one line on stdout, the same whatever the timing."""
import numpy as np
from numba import njit, prange

N, REPS, ROUNDS = 2_000_000, 20, 64

@njit(parallel=True, cache=False)
def step(x, k):
    acc = 0
    for i in prange(x.shape[0]):
        v = x[i] * 2654435761 + k
        # integer mixing work -> exact (order-independent) reduction
        for _ in range(ROUNDS):
            v = (v ^ (v >> 13)) * 1099511628211 & 0xFFFFFFFFFFFF
        acc += v & 0xFFFF
    return acc

x = np.arange(N, dtype=np.int64)
total = 0
for k in range(REPS):
    total = (total * 1000003 + step(x, k)) % 2305843009213693951
print(f"numba_prange n={N} reps={REPS} rounds={ROUNDS} checksum={total}")
