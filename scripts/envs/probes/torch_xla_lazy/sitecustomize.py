# Probe: register a torch_xla DevicePlugin "TPUSCOPE" lazily, right after the user's
# `import torch_xla` finishes, via a sys.meta_path hook (no cost if torch_xla is never imported).
# Use: PYTHONPATH=<this dir> PJRT_DEVICE=TPUSCOPE TPUSCOPE_PLUGIN_PATH=/path/plugin.so python user.py
import importlib.abc
import importlib.util
import os
import sys


def _register():
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

    plugins.register_plugin("TPUSCOPE", TpuscopePlugin())
    print("[sitecustomize] registered TPUSCOPE after import torch_xla", file=sys.stderr)


class _Hook(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name != "torch_xla":
            return None
        sys.meta_path.remove(self)  # one shot; also avoids recursing into ourselves
        spec = importlib.util.find_spec(name)
        if spec is None:
            return None
        self._real = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._real.create_module(spec)

    def exec_module(self, module):
        self._real.exec_module(module)
        _register()


if os.environ.get("PJRT_DEVICE") == "TPUSCOPE":
    sys.meta_path.insert(0, _Hook())
