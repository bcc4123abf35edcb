"""Workload for the terminal-loss tests: prints a numbered line every 0.1 s for HANGUP_SECONDS
(default 8), then writes its pid into the file HANGUP_MARK, prints DONE and exits with status
HANGUP_EXIT (default 7). A run that loses its terminal, or whose tpuscope is killed, must still
get here: the mark and DONE in its log say it did."""
import os
import sys
import time

seconds = float(os.environ.get("HANGUP_SECONDS", "8"))
start = time.time()
i = 0
while time.time() - start < seconds:
    print(f"line {i}", flush=True)
    i += 1
    time.sleep(0.1)
mark = os.environ["HANGUP_MARK"]
with open(mark + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(mark + ".tmp", mark)
print("DONE", flush=True)
sys.exit(int(os.environ.get("HANGUP_EXIT", "7")))
