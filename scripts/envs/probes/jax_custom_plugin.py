# Probe: JAX on a custom PJRT plugin named "cpuplugin" (set up by env vars, see FINDINGS.md).
import os
import jax, jax.numpy as jnp
print("PJRT_NAMES_AND_LIBRARY_PATHS =", os.environ.get("PJRT_NAMES_AND_LIBRARY_PATHS"))
print("backend:", jax.default_backend())
print("devices:", jax.devices())
print("n devices:", jax.device_count())
d = jax.devices()[0]
print("platform:", d.platform, "kind:", d.device_kind, "client platform_version:", d.client.platform_version)
x = jnp.arange(8.0)
print("sum:", float(jax.jit(lambda a: (a * 2).sum())(x)))
