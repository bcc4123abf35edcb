"""Runs a torch_xla corpus script and prints torch_xla's own metrics report on stderr at exit.

    PJRT_DEVICE=CPU PT_XLA_DEBUG_LEVEL=2 python truth_torch_xla.py SCRIPT.py --case CASE

The script runs as `__main__` (via runpy) with `sys.argv = [SCRIPT.py, --case, CASE]`. At exit,
after the script's own output, stderr gets:

    tpuscope-truth: metrics report
    <torch_xla.debug.metrics.metrics_report()>
    tpuscope-truth: short metrics report
    <torch_xla.debug.metrics.short_metrics_report()>
    tpuscope-truth: end

PT_XLA_DEBUG_MAX_FRAME defaults to 32 here (torch_xla prints 8 frames of the Python stack that
triggered a compile or an execution, too few to reach the user's line from inside a library).
"""
import os
import runpy
import sys

os.environ.setdefault("PT_XLA_DEBUG_MAX_FRAME", "32")


def _report():
    import torch_xla.debug.metrics as met

    sys.stdout.flush()
    err = sys.stderr
    print("tpuscope-truth: metrics report", file=err)
    print(met.metrics_report(), file=err)
    print("tpuscope-truth: short metrics report", file=err)
    print(met.short_metrics_report(), file=err)
    print("tpuscope-truth: end", file=err, flush=True)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: truth_torch_xla.py SCRIPT.py [ARGS...]")
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        _report()


if __name__ == "__main__":
    main()
