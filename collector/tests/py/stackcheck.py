"""Shared helpers for the collector's Python stack tests (loaded by the test scripts beside it)."""
import ctypes
import sys

BUF = 1 << 16


class Lib:
    """The collector loaded twice: PyDLL keeps the GIL across calls, CDLL releases it."""

    def __init__(self, path):
        self.py = ctypes.PyDLL(path)
        self.c = ctypes.CDLL(path)
        for lib in (self.py, self.c):
            for name in ("tpuscope_test_capture_stack", "tpuscope_test_capture_stack_new_thread",
                         "tpuscope_test_take_pending_compile_stack"):
                fn = getattr(lib, name)
                fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
                fn.restype = ctypes.c_int64
            lib.tpuscope_test_bench_capture.argtypes = [ctypes.c_uint64]
            lib.tpuscope_test_bench_capture.restype = ctypes.c_uint64
            lib.tpuscope_python_selfcheck.restype = ctypes.c_int32
            lib.tpuscope_test_direct_reader_enabled.restype = ctypes.c_int32
            lib.tpuscope_compile_request_begin.restype = ctypes.c_uint64
            lib.tpuscope_compile_request_end.argtypes = [ctypes.c_uint64]


def parse(buf, n):
    """(ok, reader, frames) from a tpuscope_test_* answer; frames are (file, line, function)."""
    if n < 0:
        return False, None, buf.raw[:-n].decode("utf-8", "replace")
    lines = buf.raw[:n].decode("utf-8").splitlines()
    reader = None
    if lines and lines[0].startswith("#"):
        reader = lines.pop(0)[1:]
    frames = []
    for line in lines:
        # file:line:function — the file may itself hold ':'; the function may not be split.
        file, rest = line.rsplit(":", 1)[0], line.rsplit(":", 1)[1]
        file, lineno = file.rsplit(":", 1)
        frames.append((file, int(lineno), rest))
    return True, reader, frames


def expected_from(frame, limit=32):
    """What the collector should see from `frame` outwards."""
    out = []
    while frame is not None and len(out) < limit:
        code = frame.f_code
        out.append((code.co_filename, frame.f_lineno, getattr(code, "co_qualname", code.co_name)))
        frame = frame.f_back
    return out


def capture(fn):
    """Calls a tpuscope_test_* capture entry; returns (answer, expected stack at the call)."""
    buf = ctypes.create_string_buffer(BUF)
    # Same line on purpose: f_lineno is live, so read the expected stack at the call's line.
    n = fn(buf, len(buf)); expected = expected_from(sys._getframe())  # noqa: E702
    return parse(buf, n), expected


def check(cond, msg):
    if not cond:
        print("FAIL:", msg, flush=True)
        sys.exit(1)
