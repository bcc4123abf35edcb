#!/usr/bin/env python3
"""A process's live socket, played from a trace file (for scripts/bench/live_long.sh).

Serves $XDG_RUNTIME_DIR/tpuscope/<own pid>.sock as the collector does: every connection receives
the trace's bytes (the backlog), the end-of-backlog mark, then nothing while the process lives
(--hang) or the end of the stream. Prints its pid once listening; runs until killed.
  fake_live.py TRACE.tps [--hang]
"""
import os
import socket
import struct
import sys
import threading
import time
import zlib

BACKLOG_END_KIND = 256  # core/src/live.rs
CHUNK = 1 << 20


def mark(backlog: int) -> bytes:
    payload = struct.pack("<Q", backlog)
    crc = zlib.crc32(struct.pack("<HH", BACKLOG_END_KIND, 0) + payload)
    return struct.pack("<IHHI", len(payload), BACKLOG_END_KIND, 0, crc) + payload


def serve(conn: socket.socket, path: str, hang: bool) -> None:
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                conn.sendall(chunk)
        conn.sendall(mark(size))
        while hang:
            time.sleep(1)
    except OSError:
        pass  # The viewer went away (attach asks the socket what it records first).
    finally:
        conn.close()


def main() -> None:
    path = sys.argv[1]
    hang = "--hang" in sys.argv[2:]
    d = os.path.join(os.environ["XDG_RUNTIME_DIR"], "tpuscope")
    os.makedirs(d, mode=0o700, exist_ok=True)
    os.chmod(d, 0o700)
    sock_path = os.path.join(d, f"{os.getpid()}.sock")
    if os.path.exists(sock_path):
        os.unlink(sock_path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock_path)
    s.listen(8)
    print(os.getpid(), flush=True)
    while True:
        conn, _ = s.accept()
        threading.Thread(target=serve, args=(conn, path, hang), daemon=True).start()


if __name__ == "__main__":
    main()
