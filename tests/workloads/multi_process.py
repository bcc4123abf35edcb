"""Workload: a launcher (like torchrun) that starts two worker processes, each running JAX;
the launcher itself never touches a device."""
import subprocess
import sys
from pathlib import Path

worker = Path(__file__).with_name("jax_shapes.py")
procs = [subprocess.Popen([sys.executable, str(worker)], stdout=subprocess.PIPE, text=True) for _ in range(2)]
outs = [p.communicate()[0] for p in procs]
codes = [p.returncode for p in procs]
results = sorted(line for out in outs for line in out.splitlines() if line.startswith("RESULT"))
print(f"RESULT multi_process workers={len(procs)} codes={codes} same={len(set(results)) == 1}")
