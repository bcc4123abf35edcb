"""Workload: TorchTPU (torch_tpu 0.2.0) eager ops plus a torch.compile'd small model on device
"tpu". Run it twice with TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT=<dir> to exercise the
persistent (tier-3) compilation cache: run 1 compiles and writes, run 2 loads.

The plugin comes from TPU_LIBRARY_PATH, which must be set before `import torch` (torch
autoloads torch_tpu, which loads the plugin). On a machine without a TPU, torch_tpu does not
bring the device up by itself (PCI scan finds nothing): the guarded forced init below does it.
TODO(tpuscope): the tpuscope Python agent will take this forced init over; then set
TPUSCOPE_WORKLOAD_NO_FORCE_INIT=1 (or delete ensure_tpu_device).
"""
import os

import torch
import torch_tpu


def ensure_tpu_device():
    if os.environ.get("TPUSCOPE_WORKLOAD_NO_FORCE_INIT") == "1":
        return
    loader = getattr(torch_tpu, "_loader", None)
    if loader is not None and not getattr(loader, "_DEVICE_INITIALIZED", True):
        loader._init_device("tpu")  # private API of torch_tpu 0.2.0


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def main():
    ensure_tpu_device()
    dev = torch.device("tpu")
    torch.manual_seed(0)

    # Eager ops.
    a = (torch.arange(64, dtype=torch.float32).reshape(8, 8) / 64.0).to(dev)
    b = a @ a.T + 1.0
    eager = b.sum().item()

    # torch.compile'd model (TorchTPU makes "tpu" the default backend for tpu inputs).
    model = MLP().to(dev)
    cmodel = torch.compile(model)
    x = torch.randn(8, 16).to(dev)
    outs = []
    with torch.no_grad():
        for i in range(3):
            outs.append(cmodel(x * (i + 1)).sum().item())
    print("tier3 cache root:", os.environ.get("TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT", "(unset)"))
    print(f"RESULT torch_tpu_cache eager={eager:.4f} compiled=" + ",".join(f"{v:.4f}" for v in outs))


if __name__ == "__main__":
    main()
