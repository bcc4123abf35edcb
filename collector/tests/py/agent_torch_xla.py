"""The agent under torch_xla 2.9 with TPUSCOPE_SETUP=torch_xla: the collector is registered as the
PJRT device plugin named by PJRT_DEVICE right after torch_xla's import (here the first import is
a submodule), steps are wrapped, and the device comes up on the collector.
Run with PYTHONPATH=<collector/python>, TPUSCOPE_COLLECTOR=<collector.so>, PJRT_DEVICE=TPUSCOPE,
TPUSCOPE_SETUP=torch_xla, TPUSCOPE_REAL_PLUGIN=<CPU plugin>."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stackcheck import check  # noqa: E402

import torch_xla.core.xla_model as xm  # noqa: E402  (the package is imported on the way)
import torch_xla  # noqa: E402
from torch_xla.experimental import plugins  # noqa: E402

check(getattr(torch_xla.sync, "__tpuscope_wrapped__", False), "torch_xla.sync not wrapped")
check(getattr(xm.mark_step, "__tpuscope_wrapped__", False), "mark_step not wrapped")
dev = torch_xla.device()
check(str(dev).startswith("xla"), f"device {dev}")
import torch_xla.runtime as xr  # noqa: E402

check(xr.device_type() == os.environ["PJRT_DEVICE"], f"device type {xr.device_type()}")
devices = torch_xla._XLAC._xla_get_all_devices()
# The collector loads the real plugin only from its GetPjrtApi: seeing it mapped proves torch_xla
# took the collector as its plugin.
with open("/proc/self/maps") as f:
    maps = f.read()
check(os.environ["TPUSCOPE_COLLECTOR"] in maps, "the collector is not loaded")
check(os.environ["TPUSCOPE_REAL_PLUGIN"] in maps, "the collector did not load the real plugin")
import torch.optim.optimizer as optimizer  # noqa: E402

check(len(optimizer._global_optimizer_post_hooks) == 1, "no optimizer post-step hook")
print("OK agent_torch_xla", dev, devices, flush=True)
