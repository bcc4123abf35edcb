"""Cost of one captured Python stack, as a hook pays it (`capture_stack`: walk + owned frames).

Usage: capture.py <libtpuscope_collector.so> [batches] [iters]
Prints one JSON object. The collector is loaded twice: through ctypes.CDLL (the GIL is released
around the call: the direct frame reader runs, as in a JAX execute hook) and ctypes.PyDLL (the GIL
is held: the C-API walker runs, as in JAX's host reads). `tpuscope_test_bench_capture(iters)`
loops `capture_stack` inside the collector and returns the mean ns per capture, so the ctypes call
itself is not in the number. Batches alternate between the two readers; p50/p99 are over batches.
"""
import ctypes
import json
import sys


def depth():
    n, f = 0, sys._getframe()
    while f is not None:
        n, f = n + 1, f.f_back
    return n


def at_depth(target, fn):
    """Calls fn with (about) `target` Python frames on the stack."""
    return at_depth(target, fn) if depth() < target else fn()


def pct(values, p):
    s = sorted(values)
    rank = max(1, min(len(s), -(-len(s) * p // 100)))
    return s[int(rank) - 1]


def main():
    so = sys.argv[1]
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    iters = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    libs = {"capi": ctypes.PyDLL(so), "direct": ctypes.CDLL(so)}
    for lib in libs.values():
        lib.tpuscope_test_bench_capture.argtypes = [ctypes.c_uint64]
        lib.tpuscope_test_bench_capture.restype = ctypes.c_uint64
        lib.tpuscope_test_capture_stack.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.tpuscope_test_capture_stack.restype = ctypes.c_int64
        lib.tpuscope_python_selfcheck.restype = ctypes.c_int32
    out = {
        "python": sys.version.split()[0],
        # 1 = the direct reader agrees with the C API walker and is on.
        "selfcheck": libs["capi"].tpuscope_python_selfcheck(),
        "batches": batches,
        "iters_per_batch": iters,
    }
    buf = ctypes.create_string_buffer(1 << 16)
    for target in (10, 30):
        row = {}
        for name, lib in libs.items():
            n = at_depth(target, lambda: lib.tpuscope_test_capture_stack(buf, len(buf)))
            text = buf.raw[: abs(n)].decode("utf-8", "replace")
            lines = text.splitlines()
            row[name + "_reader"] = lines[0].lstrip("#") if n > 0 and lines else "error: " + text
            row[name + "_frames"] = len(lines) - 1 if n > 0 else 0
        samples = {"capi": [], "direct": []}
        for _ in range(5):  # warm-up
            for name, lib in libs.items():
                at_depth(target, lambda: lib.tpuscope_test_bench_capture(iters))
        for i in range(batches):
            order = ("capi", "direct") if i % 2 == 0 else ("direct", "capi")
            for name in order:
                lib = libs[name]
                ns = at_depth(target, lambda: lib.tpuscope_test_bench_capture(iters))
                samples[name].append(float(ns))
        for name, v in samples.items():
            if min(v) == 0:
                row[name + "_error"] = "capture failed"
            row[name + "_p50_ns"] = pct(v, 50)
            row[name + "_p99_ns"] = pct(v, 99)
            row[name + "_min_ns"] = min(v)
        out["depth_%d" % target] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main()
