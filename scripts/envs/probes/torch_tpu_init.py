# Probe: bring up torch_tpu 0.2.0's "tpu" device on whatever plugin TPU_LIBRARY_PATH names.
# Steps are printed to stdout; torch_tpu's own logging goes to stderr.
import os, sys
print("STEP TPU_LIBRARY_PATH before import:", os.environ.get("TPU_LIBRARY_PATH"), flush=True)
import torch
print("STEP after import torch; torch_tpu in sys.modules:", "torch_tpu" in sys.modules, flush=True)
import torch_tpu
print("STEP after import torch_tpu; TPU_LIBRARY_PATH:", os.environ.get("TPU_LIBRARY_PATH"), flush=True)
from torch_tpu._internal.utils import hardware
print("STEP hardware.get_tpu_device_count():", hardware.get_tpu_device_count(), flush=True)
print("STEP torch_tpu._loader._LOADED:", torch_tpu._loader._LOADED, flush=True)
try:
    dev = torch_tpu._loader._init_device("tpu")
    print("STEP _init_device ->", dev, flush=True)
except Exception as e:
    print("STEP _init_device raised", type(e).__name__, e, flush=True)
    raise
try:
    t = torch.ones(4, device="tpu") * 3
    print("STEP eager tensor:", t.device, "sum", t.sum().item(), flush=True)
except Exception as e:
    print("STEP eager op raised", type(e).__name__, e, flush=True)
    raise
