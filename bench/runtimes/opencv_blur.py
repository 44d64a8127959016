"""OpenCV GaussianBlur and resize of a big 8-bit image (SIZE x SIZE, default 4096), OpenCV's own
thread count (cv2.setNumThreads left at its default); the checksum is the integer pixel sum."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _timed

(cv2, np) = _timed.need(["cv2", "numpy"], "OpenCV")

n = int(os.environ.get("SIZE", "4096"))
img = np.random.default_rng(3).integers(0, 256, size=(n, n, 3), dtype=np.uint8)
out = [None]


def op():
    blurred = cv2.GaussianBlur(img, (15, 15), 0)
    out[0] = cv2.resize(blurred, (n // 2, n // 2), interpolation=cv2.INTER_AREA)


_timed.run(op, lambda: int(out[0].sum(dtype=np.int64)), cv2.getNumThreads())
