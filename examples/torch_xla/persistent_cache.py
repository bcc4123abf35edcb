"""Persistent compilation cache: run twice, the second run should load instead of compile.

`torch_xla.runtime.initialize_cache(path)` (called before the first device use) makes torch_xla
serialize every executable it compiles into `path` and, in a later process, deserialize it
instead of compiling again. The cache directory comes from argv[1], else from
TPUSCOPE_EXAMPLE_CACHE_DIR, else /tmp/tpuscope-example-xla-cache.

Expected diagnosis, run 1 (empty directory): every graph compiled, and stored (cache_store).
Run 2 (same directory): the same graphs loaded from the cache (cache_load ok), no compile. If
run 2 compiles anyway, the cache is not being hit (a wrong or read-only path, a changed graph, a
changed torch_xla / libtpu version): the diagnosis should name the graphs that missed.
The cache is switched on at the line marked `tpuscope: cache_config`.
"""
import os
import sys

import torch
import torch_xla
import torch_xla.runtime as xr

STEPS = 6


def cache_dir():
    if len(sys.argv) > 1:
        return sys.argv[1]
    return os.environ.get("TPUSCOPE_EXAMPLE_CACHE_DIR", "/tmp/tpuscope-example-xla-cache")


def main():
    path = cache_dir()
    before = len(os.listdir(path)) if os.path.isdir(path) else 0
    xr.initialize_cache(path, readonly=False)  # tpuscope: cache_config
    torch.manual_seed(0)
    dev = torch_xla.device()
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 16).to(dev)
    y = torch.tanh(x.sum(-1, keepdim=True) * 0.25)
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        torch_xla.sync()
    final = loss.item()  # tpuscope-not: host_sync
    after = len(os.listdir(path)) if os.path.isdir(path) else 0
    print(f"cache dir {path}: {before} entries before, {after} after")
    print(f"RESULT persistent_cache steps={STEPS} loss={final:.6f} "
          f"entries_before={before} entries_after={after}")


if __name__ == "__main__":
    main()
