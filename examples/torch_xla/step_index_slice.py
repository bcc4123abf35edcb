"""Bug: a Python int step index slices a tensor that lives on the XLA device
(pytorch/xla#1368).

The whole (small) dataset is moved to the device once, and each step takes its batch with
`data[step]`. torch_xla records the index of a slice as part of the traced graph (not as device
data), so the graph of every step is different and `torch_xla.sync()` compiles a new program
each step: the programs differ only in the slice offset.

Expected diagnosis: one compile per step of the step graph (`SyncTensorsGraph.*`), cause
"constant changed" (the start index of the slice/select taken at the line marked
`tpuscope: constant_changed`; the compile is requested at `tpuscope-trigger:
constant_changed`). Fix: iterate a DataLoader wrapped in `pl.MpDeviceLoader`, or index with a
device tensor (`torch.index_select(data, 0, idx_on_device)`).
"""
import torch
import torch_xla

STEPS = 10
BATCH = 32


def main():
    torch.manual_seed(0)
    dev = torch_xla.device()
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.randn(STEPS, BATCH, 16).to(dev)
    target = torch.tanh(data.sum(-1, keepdim=True) * 0.25)
    torch_xla.sync()
    for step in range(STEPS):
        x, y = data[step], target[step]  # tpuscope: constant_changed
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        torch_xla.sync()  # tpuscope-trigger: constant_changed
    final = loss.item()  # tpuscope-not: host_sync
    print(f"RESULT step_index_slice steps={STEPS} loss={final:.6f}")


if __name__ == "__main__":
    main()
