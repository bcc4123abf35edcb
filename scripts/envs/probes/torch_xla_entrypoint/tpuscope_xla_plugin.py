# Probe: torch_xla DevicePlugin found through the `torch_xla.plugins` entry-point group.
# torch_xla 2.9's __init__ loads that group itself (XLA_REGISTER_INSTALLED_PLUGINS defaults to 1),
# so a dist-info directory on PYTHONPATH is enough: no sitecustomize, no user-code change.
# Use: PYTHONPATH=<this dir> PJRT_DEVICE=TPUSCOPE TPUSCOPE_PLUGIN_PATH=/path/plugin.so python user.py
import os

from torch_xla.experimental import plugins


class TpuscopePlugin(plugins.DevicePlugin):
    def library_path(self):
        return os.environ["TPUSCOPE_PLUGIN_PATH"]

    def physical_chip_count(self):
        return 1

    def client_create_options(self):
        return {}

    def configure_single_process(self):
        pass
