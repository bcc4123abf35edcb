"""Cost per captured stack, both readers, at ~10 and ~30 frames.
Usage: bench_capture.py <collector.so> [iters]"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stackcheck import Lib  # noqa: E402

lib = Lib(sys.argv[1])
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20000


def depth():
    n, f = 0, sys._getframe()
    while f is not None:
        n, f = n + 1, f.f_back
    return n


def at_depth(target, fn):
    return at_depth(target, fn) if depth() < target else fn()


lib.py.tpuscope_python_selfcheck()
for frames in (10, 30):
    # The best of 5 runs: the machine is shared, the minimum is the cost, the rest is noise.
    capi = min(at_depth(frames, lambda: lib.py.tpuscope_test_bench_capture(iters)) for _ in range(5))
    direct = min(at_depth(frames, lambda: lib.c.tpuscope_test_bench_capture(iters)) for _ in range(5))
    if capi == 0 or direct == 0:
        print("FAIL: capture failed in the benchmark", flush=True)
        sys.exit(1)
    print(f"BENCH python={sys.version.split()[0]} frames={frames} capi_ns={capi} direct_ns={direct}", flush=True)
