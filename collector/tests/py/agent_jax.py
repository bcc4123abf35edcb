"""The agent under JAX 0.10.2 with the collector as JAX's PJRT plugin: `import jax` installs the
compile-request wrapper, so each compile (run by PJRT on a worker thread without Python frames)
is recorded with the stack of the Python code that asked for it. The test reads the trace.
Run with PYTHONPATH=<collector/python>, TPUSCOPE_COLLECTOR=<collector.so>,
PJRT_NAMES_AND_LIBRARY_PATHS=tpuscope:<collector.so>, JAX_PLATFORMS=tpuscope,
TPUSCOPE_REAL_PLUGIN=<CPU plugin>, TPUSCOPE_OUT=<trace>."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stackcheck import check  # noqa: E402

check("tpuscope_agent" in sys.modules, "the agent was not started by sitecustomize")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax._src import compiler  # noqa: E402

check(getattr(compiler.compile_or_get_cached, "__tpuscope_wrapped__", False),
      "compile_or_get_cached is not wrapped")


def user_step(x):
    return jax.jit(lambda v: v * 2 + 1)(x)  # USER_STEP_LINE


def outer():
    return user_step(jnp.arange(4.0))


out = outer()
check(float(out.sum()) == 16.0, f"wrong result {out}")
check(jax.devices()[0].client.platform_version.startswith("PJRT C API"), "not on the plugin")
line = next(i for i, text in enumerate(open(__file__), 1) if text.rstrip().endswith("# USER_STEP_LINE"))
print("OK agent_jax", os.path.abspath(__file__), line, flush=True)
