"""(a) GIL held → C-API reader; (b) GIL released → direct reader, identical frames; (c) a native
thread without Python state → error; plus self-check, generators, C callbacks, non-ASCII names
and the compile-request hand-off. Usage: capture_paths.py <collector.so>"""
import ctypes
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stackcheck import Lib, capture, check, expected_from, parse  # noqa: E402

lib = Lib(sys.argv[1])


def compare(label, fn, want_reader):
    (ok, reader, frames), expected = capture(fn)
    check(ok, f"{label}: capture failed: {frames}")
    check(reader == want_reader, f"{label}: reader {reader}, want {want_reader}")
    check(frames == expected, f"{label}: frames differ\n got  {frames[:6]}\n want {expected[:6]}")
    # Innermost: stackcheck.capture at its call line, then compare, then both, then the test site.
    check(frames[0][2] == "capture" and frames[0][0].endswith("stackcheck.py"), f"{label}: top {frames[0]}")
    return frames


def both(label):
    a = compare(label + "/gil", lib.py.tpuscope_test_capture_stack, "capi")
    b = compare(label + "/nogil", lib.c.tpuscope_test_capture_stack, "direct")
    # Same frames except the line of the call site that differs between the two calls above.
    check([f[0::2] for f in a] == [f[0::2] for f in b], f"{label}: readers disagree")
    return a


class Outer:
    def method(self, depth):
        if depth:
            return self.method(depth - 1)
        return both("method")


def level1():
    def level2():
        def level3():
            return both("nested")
        return level3()
    return level2()


def gen():
    yield both("generator")


def grüße():  # latin-1 name
    return both("latin1")


def 関数():  # UCS-2 name
    return both("ucs2")


def 𠀋():  # UCS-4 name
    return both("ucs4")


def through_c_callbacks():
    # map() and functools.reduce are C: Python → C → Python adds entry frames (3.12+ shims).
    return list(map(lambda _: functools.reduce(lambda acc, _x: both("c-callback"), [0, 1], None), [0]))[0]


# Before any self-check: the direct reader is trusted on x86_64 for 3.11–3.13.
print("direct reader enabled before selfcheck:", lib.py.tpuscope_test_direct_reader_enabled())
check(lib.py.tpuscope_python_selfcheck() == 1, "selfcheck (GIL held) did not agree")
check(lib.c.tpuscope_python_selfcheck() == -1, "selfcheck without the GIL should be unavailable")
check(lib.py.tpuscope_test_direct_reader_enabled() == 1, "direct reader not enabled after selfcheck")

frames = level1()
check([f[2] for f in frames[2:6]] == ["both", "level1.<locals>.level2.<locals>.level3",
                                      "level1.<locals>.level2", "level1"], f"nested names {frames[:6]}")
frames = Outer().method(3)
check([f[2] for f in frames[2:7]] == ["both"] + ["Outer.method"] * 4, f"method names {frames[:7]}")
frames = next(gen())
check(frames[3][2] == "gen", f"generator frame {frames[:3]}")
check(grüße()[3][2] == "grüße", "latin-1 name")
check(関数()[3][2] == "関数", "ucs-2 name")
check(𠀋()[3][2] == "𠀋", "ucs-4 name")
frames = through_c_callbacks()
check([f[2] for f in frames[3:6]] == ["through_c_callbacks.<locals>.<lambda>.<locals>.<lambda>",
                                      "through_c_callbacks.<locals>.<lambda>", "through_c_callbacks"],
      f"callback frames {frames[:6]}")


def fresh_code_objects():
    # Code objects freed and new ones made (CPython often puts them at the same address) with
    # other names, files and lines: captures must not get the names or lines the collector
    # remembered for the old ones.
    for i in range(30):
        src = "\n" * (i % 7) + f"def fresh_{i}():\n    return both('fresh')\n"
        ns = {"both": both}
        exec(compile(src, f"<fresh {i % 3}>", "exec"), ns)
        frames = ns[f"fresh_{i}"]()
        want = (f"<fresh {i % 3}>", i % 7 + 2, f"fresh_{i}")
        check(frames[3] == want, f"fresh code object {i}: {frames[3]}, want {want}")
        del ns, frames


fresh_code_objects()


def deep(n, fn):
    return deep(n - 1, fn) if n else fn()


# Deeper than 32 frames: both readers stop at 32, innermost first.
frames = deep(40, lambda: both("deep"))
check(len(frames) == 32, f"deep stack kept {len(frames)} frames")

# (c) A native thread with no Python state.
for lib_ in (lib.py, lib.c):
    (ok, _, msg), _ = capture(lib_.tpuscope_test_capture_stack_new_thread)
    check(not ok and msg == "thread has no Python state", f"new thread: {ok} {msg!r}")

# The compile-request hand-off: the stack captured at begin reaches a worker thread.
def request_compile():
    token = lib.py.tpuscope_compile_request_begin(); expected = expected_from(sys._getframe(), 96)  # noqa: E702
    check(token != 0, "compile request begin gave no token")
    (ok, _, frames), _ = capture(lib.c.tpuscope_test_take_pending_compile_stack)
    check(ok and frames == expected, f"pending stack\n got  {frames[:4]}\n want {expected[:4]}")
    (ok, _, _), _ = capture(lib.c.tpuscope_test_take_pending_compile_stack)
    check(not ok, "a claimed request was handed out twice")
    lib.py.tpuscope_compile_request_end(token)


request_compile()
(ok, _, _), _ = capture(lib.c.tpuscope_test_take_pending_compile_stack)
check(not ok, "an ended request is still pending")

print("OK capture_paths", sys.version.split()[0], flush=True)
