"""PyTorch CPU fp32 matmul (SIZE x SIZE, default 2048), torch's own intra-op thread count."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _timed

(torch,) = _timed.need(["torch"], "PyTorch")

n = int(os.environ.get("SIZE", "2048"))
g = torch.Generator().manual_seed(1)
a = torch.randint(0, 4, (n, n), generator=g).to(torch.float32)
b = torch.randint(0, 4, (n, n), generator=g).to(torch.float32)
c = torch.empty((n, n), dtype=torch.float32)

_timed.run(
    lambda: torch.mm(a, b, out=c),
    lambda: c.to(torch.float64).sum().item(),
    torch.get_num_threads(),
)
