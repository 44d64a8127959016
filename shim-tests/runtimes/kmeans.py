"""scikit-learn KMeans (OpenMP lloyd, one thread per CPU of the mask) on a fixed synthetic dataset,
for shim-tests/tests/placement/real_runtimes.rs: about 3 s on 2 CPUs. Prints exactly one line on
stdout, the same whatever the timing: static chunks per thread, and the rounding below."""
import numpy as np
from sklearn.cluster import KMeans

N, D, K, MAX_ITER = 300_000, 16, 32, 80

rng = np.random.default_rng(12345)
centers = rng.uniform(-4.0, 4.0, size=(K, D))          # overlapping blobs -> lloyd keeps iterating
X = centers[rng.integers(0, K, size=N)] + rng.normal(0.0, 1.5, size=(N, D))

km = KMeans(n_clusters=K, n_init=1, init="k-means++", max_iter=MAX_ITER, tol=0.0,
            algorithm="lloyd", random_state=7).fit(X)
sizes = np.sort(np.bincount(km.labels_, minlength=K))
# OpenMP reductions may reorder float sums (thread count / lock order): round hard.
print(f"kmeans n={N} k={K} inertia={km.inertia_:.5e} size_min={sizes[0] // 100} size_max={sizes[-1] // 100}")
