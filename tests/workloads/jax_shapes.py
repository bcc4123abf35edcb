"""Workload: one jitted function called over 4 distinct input shapes (3 calls each), every
result read back to the host. Expect 4 compiles and 12 executes + 12 host reads.

Run on a plugin by env, e.g.:
  PJRT_NAMES_AND_LIBRARY_PATHS=cpuplugin:/path/pjrt_c_api_cpu_plugin.so JAX_PLATFORMS=cpuplugin \
      python tests/workloads/jax_shapes.py
"""
import jax
import jax.numpy as jnp
import numpy as np

SHAPES = [(8, 16), (32, 16), (64, 64), (128, 32)]
REPEATS = 3


@jax.jit
def f(x):
    return jnp.tanh(x @ x.T * 0.01).sum(axis=0) + 1.0


def main():
    total = 0.0
    reads = 0
    for shape in SHAPES:
        for rep in range(REPEATS):
            n = shape[0] * shape[1]
            x = (np.arange(n, dtype=np.float32).reshape(shape) % 7 - 3) * (rep + 1) * 0.1
            y = f(jnp.asarray(x))
            total += float(y.sum())          # host read
            host = np.asarray(y)             # second host read path
            reads += 2
            assert host.shape == (shape[0],)
    print(f"backend={jax.default_backend()} devices={jax.device_count()}")
    print(f"RESULT jax_shapes shapes={len(SHAPES)} calls={len(SHAPES) * REPEATS} reads={reads} checksum={total:.4f}")


if __name__ == "__main__":
    main()
