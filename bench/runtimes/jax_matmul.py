"""JAX CPU fp32 matmul (SIZE x SIZE, default 2048) with block_until_ready; XLA's own pool."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _timed

os.environ.setdefault("JAX_PLATFORMS", "cpu")
(jax, np) = _timed.need(["jax", "numpy"], "JAX")
import jax.numpy as jnp

n = int(os.environ.get("SIZE", "2048"))
a = jnp.asarray(_timed.int_matrix(np, n, 1, np.float32))
b = jnp.asarray(_timed.int_matrix(np, n, 2, np.float32))
mm = jax.jit(jnp.matmul)
out = [None]


def op():
    out[0] = mm(a, b).block_until_ready()


_timed.run(op, lambda: np.asarray(out[0]).sum(dtype=np.float64), 0)
