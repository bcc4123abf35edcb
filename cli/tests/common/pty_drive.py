"""Runs a command in a new pseudo-terminal (as a terminal emulator or tmux would), reads what it
draws, and DELAY seconds later does ACTION: `close` (the terminal goes away: the master side is
closed, as when a window or a tmux session is killed), `kill9` (SIGKILL to the command) or `term`
(SIGTERM to it). Then waits at most TIMEOUT seconds for the command to exit and prints one JSON
line: its exit code (null if it had not exited: it is then killed), the seconds it took after
the action, and the CPU time (clock ticks) it used meanwhile.

  python3 pty_drive.py ACTION DELAY TIMEOUT -- COMMAND ARGS...
"""
import fcntl
import json
import os
import pty
import select
import signal
import struct
import sys
import termios
import time

action, delay, timeout = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
argv = sys.argv[sys.argv.index("--") + 1:]
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
    os.environ["TERM"] = "xterm-256color"
    os.execvp(argv[0], argv)

drawn = 0


def drain(seconds):
    """Reads what the command draws for `seconds` (a full terminal would block it)."""
    global drawn, fd
    end = time.time() + seconds
    while fd is not None and time.time() < end:
        ready, _, _ = select.select([fd], [], [], max(0.0, min(0.05, end - time.time())))
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b""
            if not data:
                return
            drawn += len(data)


def cpu_ticks():
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


drain(delay)
before = cpu_ticks() or 0
last = before
if action == "close":
    os.close(fd)
    fd = None
elif action == "kill9":
    os.kill(pid, signal.SIGKILL)
elif action == "term":
    os.kill(pid, signal.SIGTERM)
else:
    sys.exit(f"unknown action {action}")
acted = time.time()
code = None
while time.time() - acted < timeout:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        code = os.waitstatus_to_exitcode(status)
        break
    now = cpu_ticks()
    if now is not None:
        last = now
    drain(0.1)
seconds = time.time() - acted
if code is None:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(json.dumps({"exit": code, "seconds": round(seconds, 2), "cpu_ticks": last - before, "drawn": drawn}))
