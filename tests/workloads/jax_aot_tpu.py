"""Workload: compile-only for a TPU v5e 2x2 topology from JAX, without a TPU.

  TPU_SKIP_MDS_QUERY=1 TPU_LIBRARY_PATH=/path/libtpu.so JAX_PLATFORMS=cpu \
      python tests/workloads/jax_aot_tpu.py [TOPOLOGY]      (default v5e:2x2)

TPU_LIBRARY_PATH names libtpu (or a collector in front of it); JAX_PLATFORMS=cpu keeps JAX from
trying to open a TPU client. Prints the compiled program's memory_analysis numbers.
"""
import sys

import jax
import jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec as P


def f(x, w):
    return jnp.tanh(x @ w).sum(axis=1)


def main():
    topo_name = sys.argv[1] if len(sys.argv) > 1 else "v5e:2x2"
    topo = topologies.get_topology_desc(topo_name, "tpu")
    devs = topo.devices
    mesh = topologies.make_mesh(topo, (len(devs),), ("data",))
    x = jax.ShapeDtypeStruct((1024, 512), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))
    w = jax.ShapeDtypeStruct((512, 256), jnp.float32, sharding=NamedSharding(mesh, P(None, None)))
    compiled = jax.jit(f).lower(x, w).compile()
    ma = compiled.memory_analysis()
    fields = ["argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
              "temp_size_in_bytes", "generated_code_size_in_bytes"]
    vals = {k: getattr(ma, k, None) for k in fields}
    print(f"topology={topo_name} devices={len(devs)} kind={devs[0].device_kind}")
    for k, v in vals.items():
        print(f"  {k} = {v}")
    print("RESULT jax_aot_tpu " + topo_name + " " + " ".join(
        f"{k.replace('_size_in_bytes', '')}={vals[k]}" for k in fields[:4]))


if __name__ == "__main__":
    main()
