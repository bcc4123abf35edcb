# Probe: can JAX (jax venv, no libtpu installed there) compile for TPU through a libtpu .so named
# by TPU_LIBRARY_PATH, without a TPU? Also prints cost_analysis and the optimized HLO's first lines.
import sys
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec as P

topo = topologies.get_topology_desc(sys.argv[1] if len(sys.argv) > 1 else "v5e:2x2", "tpu")
print("devices:", topo.devices)
mesh = topologies.make_mesh(topo, (len(topo.devices),), ("d",))
x = jax.ShapeDtypeStruct((256, 128), jnp.float32, sharding=NamedSharding(mesh, P("d", None)))
c = jax.jit(lambda a: (a * 2).sum(0)).lower(x).compile()
print("memory_analysis:", c.memory_analysis())
ca = c.cost_analysis()
print("cost_analysis flops:", (ca[0] if isinstance(ca, list) else ca).get("flops"))
print("hlo head:", c.as_text().splitlines()[0][:200])
