"""The module's conversion of a NumPy array (CPU): qvg.compare(x, x) on a float32
[8, 29640, 128] array converts two inputs, then compares them in double.
Median of 5 runs after a warm-up.
    PYTHONPATH=build/python /usr/bin/python3 python/bench/bench_convert.py
"""
import time

import numpy as np

import qvg

x = np.random.default_rng(0).standard_normal((8, 29640, 128)).astype(np.float32)
qvg.compare(x, x)
t = []
for _ in range(5):
    t0 = time.perf_counter()
    qvg.compare(x, x)
    t.append(time.perf_counter() - t0)
print("compare(x, x) [8, 29640, 128] float32: median %.1f ms" % (1e3 * sorted(t)[2]))
