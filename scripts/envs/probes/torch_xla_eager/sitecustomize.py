# Probe: register a torch_xla DevicePlugin "TPUSCOPE" eagerly at interpreter start.
# Use: PYTHONPATH=<this dir> PJRT_DEVICE=TPUSCOPE TPUSCOPE_PLUGIN_PATH=/path/plugin.so python user.py
import os, sys

if os.environ.get("PJRT_DEVICE") == "TPUSCOPE":
    import torch_xla  # noqa: F401  (heavy: imports torch + torch_xla at startup)
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
    print("[sitecustomize] registered TPUSCOPE eagerly", file=sys.stderr)
