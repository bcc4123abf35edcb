# Probe: how late can a torch_xla DevicePlugin be registered? (after import, after device())
import os, sys
import torch, torch_xla
from torch_xla.experimental import plugins

class P(plugins.DevicePlugin):
    def library_path(self): return os.environ["TPUSCOPE_PLUGIN_PATH"]
    def configure_single_process(self): pass

when = sys.argv[1]
if when == "after_import":
    plugins.register_plugin("TPUSCOPE", P())
    dev = torch_xla.device()
    print("device:", dev, "devices:", torch_xla._XLAC._xla_get_all_devices())
    t = torch.ones(4, device=dev) * 2
    torch_xla.sync()
    print("sum:", t.sum().item())
elif when == "after_device":
    try:
        dev = torch_xla.device()
    except Exception as e:
        print("device() before register:", type(e).__name__, str(e).splitlines()[0])
    plugins.register_plugin("TPUSCOPE", P())
    dev = torch_xla.device()
    print("device after late register:", dev)
