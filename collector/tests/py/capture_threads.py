"""(d) 8 Python threads capturing concurrently with the GIL released (and some with it held)
while another thread keeps the interpreter busy: no hang, no crash, every stack exact.
Usage: capture_threads.py <collector.so> <seconds>"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stackcheck import Lib, capture  # noqa: E402

lib = Lib(sys.argv[1])
seconds = float(sys.argv[2])
sys.setswitchinterval(1e-5)  # hand the GIL around as often as possible
stop = time.monotonic() + seconds
errors = []
counts = [0] * 8


def recurse(n, fn):
    return recurse(n - 1, fn) if n else fn()


def worker(i):
    fn = lib.c.tpuscope_test_capture_stack if i % 4 else lib.py.tpuscope_test_capture_stack
    try:
        def once():
            (ok, reader, frames), expected = capture(fn)
            if not ok or frames != expected:
                errors.append((i, reader, frames[:3] if ok else frames, expected[:3]))
            return ok
        while time.monotonic() < stop and not errors:
            recurse(i * 3, once)
            counts[i] += 1
    except Exception as e:  # noqa: BLE001
        errors.append((i, repr(e)))


def churn():
    # Keeps creating and dropping frames and objects on another thread.
    while time.monotonic() < stop:
        recurse(20, lambda: [str(x) for x in range(50)])


threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)] + [threading.Thread(target=churn)]
for t in threads:
    t.start()
for t in threads:
    t.join(seconds + 30)
    if t.is_alive():
        print("FAIL: a thread hung", flush=True)
        os._exit(1)
if errors:
    print("FAIL:", errors[:3], flush=True)
    sys.exit(1)
print("OK capture_threads", sys.version.split()[0], "captures per thread", counts, flush=True)
