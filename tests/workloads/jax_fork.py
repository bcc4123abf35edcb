"""Workload: uses JAX, forks a child (as data loaders do) that does plain Python work and exits,
then keeps computing in the parent."""
import os

import jax
import jax.numpy as jnp


def main():
    f = jax.jit(lambda v: v * 2 + 1)
    x = jnp.arange(16.0)
    first = float(f(x).sum())
    pid = os.fork()
    if pid == 0:
        # The child never touches the device; it must not hang or write a broken trace.
        print(f"child sum {sum(range(1000))}", flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    second = float(f(x + 1).sum())
    print(f"RESULT jax_fork child_status={status} first={first} second={second}")


if __name__ == "__main__":
    main()
