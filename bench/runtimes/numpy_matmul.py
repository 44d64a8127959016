"""numpy/OpenBLAS fp32 matmul (SIZE x SIZE, default 2048), OpenBLAS's own thread count."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _timed

(np,) = _timed.need(["numpy"], "numpy")

n = int(os.environ.get("SIZE", "2048"))
a = _timed.int_matrix(np, n, 1, np.float32)
b = _timed.int_matrix(np, n, 2, np.float32)
c = np.empty((n, n), dtype=np.float32)


def threads():
    try:
        from threadpoolctl import threadpool_info

        return max((p["num_threads"] for p in threadpool_info() if p["internal_api"] in ("openblas", "mkl", "blis")), default=0)
    except Exception:
        return 0


_timed.run(lambda: np.matmul(a, b, out=c), lambda: c.sum(dtype=np.float64), threads())
