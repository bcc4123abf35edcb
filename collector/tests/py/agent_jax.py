"""The agent under JAX: `import jax` installs the compile-request wrapper; a compile PJRT would
run on a worker thread gets the stack of the Python code that asked for it.
Run with PYTHONPATH=<collector/python>, TPUSCOPE_COLLECTOR=<collector.so>, JAX_PLATFORMS=cpu."""
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stackcheck import check, parse  # noqa: E402

check("tpuscope_agent" in sys.modules, "the agent was not started by sitecustomize")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax._src import compiler  # noqa: E402

check(getattr(compiler.compile_or_get_cached, "__tpuscope_wrapped__", False),
      "compile_or_get_cached is not wrapped")
lib = ctypes.CDLL(os.environ["TPUSCOPE_COLLECTOR"])
lib.tpuscope_test_take_pending_compile_stack.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
lib.tpuscope_test_take_pending_compile_stack.restype = ctypes.c_int64

seen = []
backend_compile = compiler.backend_compile_and_load


def spy(*args, **kwargs):
    # Stands in for the collector's compile hook: on a native thread without Python state, it
    # takes the stack of the compile request in flight.
    buf = ctypes.create_string_buffer(1 << 16)
    seen.append(parse(buf, lib.tpuscope_test_take_pending_compile_stack(buf, len(buf))))
    return backend_compile(*args, **kwargs)


compiler.backend_compile_and_load = spy


def user_step(x):
    return jax.jit(lambda v: v * 2 + 1)(x); line = sys._getframe().f_lineno  # noqa: E702,F841


def outer():
    return user_step(jnp.arange(4.0))


out = outer()
check(float(out.sum()) == 16.0, f"wrong result {out}")
check(seen and all(ok for ok, _, _ in seen), f"a compile found no pending stack: {seen}")
# arange and sum compile too; the jit in user_step is the one whose stack holds user_step.
mine_compiles = [fr for _, _, fr in seen if any(f[2] == "user_step" for f in fr)]
check(len(mine_compiles) == 1, f"expected one compile from user_step, saw {len(mine_compiles)}")
frames = mine_compiles[0]
check(not any("tpuscope_agent" in f[0] for f in frames), f"agent frames kept: {frames[:3]}")
mine = [f for f in frames if f[0] == os.path.abspath(__file__)]
user_line = next(i for i, l in enumerate(open(__file__), 1) if l.strip().startswith("return jax.jit("))
check([f[2] for f in mine[:3]] == ["user_step", "outer", "<module>"], f"user frames {mine[:3]}")
check(mine[0][1] == user_line, f"user_step line {mine[0][1]} != {user_line}")
# Innermost: the caller of the wrapped compile_or_get_cached (the agent's wrapper is dropped).
check(frames[0][2] == "_cached_compilation", f"innermost frame: {frames[0]}")
print("OK agent_jax", len(frames), "frames; innermost", frames[0], flush=True)
