"""A clean TorchTPU training loop: nothing to find.

A `torch.compile`d model (dynamic=False) trained on fixed-shape batches that are already on the
device, with a plain SGD optimizer; the loss is accumulated on the device and read once, after the
loop.

Expected diagnosis: no finding. The compiled forward and backward programs are compiled once
each, and every eager op (the optimizer's updates, the loss accumulation) once per shape, all
during the first step; later steps only execute. No host sync inside the loop; one read at the
end.
"""
import torch

STEPS = 12
BATCH = 32


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 1)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def main():
    dev = torch.device("tpu")
    torch.manual_seed(0)
    model = MLP().to(dev)
    cmodel = torch.compile(model, dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w_true = torch.randn(16, 1)
    xs = [torch.randn(BATCH, 16) for _ in range(4)]
    batches = [(x.to(dev), torch.tanh(x @ w_true).to(dev)) for x in xs]
    running = torch.zeros((), device=dev)
    for step in range(STEPS):
        x, y = batches[step % len(batches)]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(cmodel(x), y)
        loss.backward()
        opt.step()
        running += loss.detach()
    mean_loss = (running / STEPS).item()  # tpuscope-not: host_sync
    print(f"RESULT clean_loop steps={STEPS} mean_loss={mean_loss:.6f}")


if __name__ == "__main__":
    main()
