"""numba @njit(parallel=True) prange kernel: an integer hash chain per element (exact, so the
checksum does not depend on the threads); numba's own thread count (NUMBA_NUM_THREADS)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _timed

os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(tempfile.gettempdir(), "goset-numba-cache"))
(numba, np) = _timed.need(["numba", "numpy"], "numba")

n = int(os.environ.get("SIZE", "400000"))
steps = int(os.environ.get("STEPS", "256"))


@numba.njit(parallel=True, cache=True)
def kernel(x, out, steps):
    for i in numba.prange(x.shape[0]):
        v = x[i]
        for _ in range(steps):
            v ^= (v << np.uint64(13)) & np.uint64(0xFFFFFFFFFFFFFFFF)
            v ^= v >> np.uint64(7)
            v ^= (v << np.uint64(17)) & np.uint64(0xFFFFFFFFFFFFFFFF)
        out[i] = v & np.uint64(0xFFFF)


x = np.arange(1, n + 1, dtype=np.uint64)
out = np.empty(n, dtype=np.uint64)
_timed.run(lambda: kernel(x, out, steps), lambda: int(out.sum()), numba.get_num_threads())
