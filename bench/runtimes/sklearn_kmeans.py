"""scikit-learn KMeans (Lloyd, OpenMP) fit on fixed blobs with a fixed seed and iteration count;
the checksum is the sum of squared cluster sizes (well-separated blobs: no point changes cluster
with the threads' summation order)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _timed

(sklearn, np) = _timed.need(["sklearn", "numpy"], "scikit-learn")
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

n = int(os.environ.get("SIZE", "200000"))
X, _ = make_blobs(n_samples=n, centers=16, n_features=16, cluster_std=1.0, random_state=0)
X = X.astype(np.float64)
last = [None]


def op():
    km = KMeans(n_clusters=16, n_init=1, max_iter=10, tol=0.0, algorithm="lloyd", random_state=0)
    last[0] = km.fit(X).labels_


def checksum():
    sizes = np.bincount(last[0], minlength=16).astype(np.int64)
    return int((sizes * sizes).sum())


def threads():
    try:
        from threadpoolctl import threadpool_info

        return max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp"), default=0)
    except Exception:
        return 0


_timed.run(op, checksum, threads())
