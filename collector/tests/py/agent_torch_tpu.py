"""The agent under torch_tpu 0.2.0 with TPUSCOPE_SETUP=torch_tpu: `import torch` autoloads
torch_tpu from inside torch's own import; once torch has finished, the agent forces the device
start (no TPU here), and eager ops run on the collector standing in for libtpu.
Run with PYTHONPATH=<collector/python>, TPUSCOPE_COLLECTOR=<collector.so>, TPUSCOPE_SETUP=torch_tpu,
TPU_LIBRARY_PATH=<collector.so>, TPUSCOPE_REAL_PLUGIN=<CPU plugin>, TPUSCOPE_ROLE=standin."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stackcheck import check  # noqa: E402

import torch  # noqa: E402  (autoloads torch_tpu)

check("torch_tpu" in sys.modules, "torch did not autoload torch_tpu")
import torch_tpu  # noqa: E402

check(torch_tpu._loader._DEVICE_INITIALIZED, "the agent did not start the tpu device")
t = torch.ones(4, device="tpu") * 3
total = t.sum().item()
check(total == 12.0, f"sum {total}")
import torch.optim.optimizer as optimizer  # noqa: E402

check(len(optimizer._global_optimizer_post_hooks) == 1, "no optimizer post-step hook")
from tpuscope_agent import collector  # noqa: E402

model = torch.nn.Linear(4, 2).to("tpu")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    model(torch.ones(3, 4, device="tpu")).sum().backward()
    opt.step()
check(collector._counts.get("optimizer.step") == 2, f"steps {collector._counts}")
print("OK agent_torch_tpu", total, flush=True)
