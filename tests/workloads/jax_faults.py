"""Workload for fault injection: several jitted calls, each guarded; prints every error the
frontend raised, so runs with and without tpuscope can be compared line by line."""
import jax
import jax.numpy as jnp
import numpy as np


def attempt(label, fn):
    try:
        out = fn()
        print(f"{label}: ok {out}")
    except Exception as e:  # the frontend's own exception type and text
        print(f"{label}: {type(e).__name__}: {str(e).splitlines()[0]}")


def main():
    x = jnp.asarray(np.arange(8, dtype=np.float32))
    for i, op in enumerate([jnp.sin, jnp.cos, jnp.tanh, jnp.exp]):
        f = jax.jit(lambda v, op=op: op(v) * 2.0)
        attempt(f"compile+run {i}", lambda: float(f(x).sum()))
        attempt(f"rerun {i}", lambda: float(f(x).sum()))
    print("RESULT jax_faults done")


if __name__ == "__main__":
    main()
