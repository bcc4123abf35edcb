# tpuscope-sitecustomize (marker: a chained search skips files that carry it)
"""Started by `tpuscope run` (this directory first on PYTHONPATH): installs the tpuscope agent, then
runs the next `sitecustomize` further on sys.path, as Python would have without us.

Never raises: a failure prints one line starting with `tpuscope:` on stderr and the program runs
on untouched. Costs well under a millisecond: the agent only installs an import hook here; the
collector is loaded when a frontend (jax, torch_xla, torch_tpu) is imported."""


def _tpuscope_start():
    import sys

    def warn(what, err):
        try:
            sys.stderr.write("tpuscope: %s: %s: %s\n" % (what, type(err).__name__, err))
        except BaseException:  # noqa: BLE001 - stderr may be closed; stay silent then
            pass

    try:
        import tpuscope_agent

        tpuscope_agent.install()
    except BaseException as e:  # noqa: BLE001 - must never break the user's program
        warn("agent not started", e)
    try:
        _tpuscope_chain(sys)
    except BaseException as e:  # noqa: BLE001 - site.py would also just report and go on
        warn("error in the next sitecustomize", e)


def _tpuscope_chain(sys):
    """Runs the first sitecustomize on sys.path that is not a tpuscope one."""
    import os
    from importlib.machinery import PathFinder

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in list(sys.path):
        try:
            if os.path.abspath(entry or os.curdir) == here:
                continue
        except (TypeError, ValueError):
            continue
        spec = PathFinder.find_spec("sitecustomize", [entry])
        if spec is None or spec.loader is None:
            continue
        origin = spec.origin or ""
        try:
            with open(origin, "rb") as f:
                if b"tpuscope-sitecustomize" in f.read(200):
                    continue  # another copy of this file: keep looking past it
        except OSError:
            pass
        import importlib.util

        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return


_tpuscope_start()
del _tpuscope_start, _tpuscope_chain
