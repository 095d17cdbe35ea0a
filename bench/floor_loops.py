"""The references' own loops in plain Python, each iteration timed as commbench's harness times it (a
clock read before and after each, into a preallocated list): what bench/floors.py puts beside the
reference and commbench. No commbench import: this is the floor a Python tool stands on.

    python bench/floor_loops.py tcp-server PORT
    python bench/floor_loops.py tcp-client PORT SIZE ITERATIONS WARMUP   -> "mean_one_way_us p50_one_way_us"
    python bench/floor_loops.py tcp-sink PORT
    python bench/floor_loops.py tcp-stream PORT SIZE SECONDS              -> "MB/s"
    mpiexec -n 2 python bench/floor_loops.py mpi-bw SIZE WINDOWS WARMUP  -> "MB/s" (rank 0)
    mpiexec -n 4 python bench/floor_loops.py allreduce SIZE ITERATIONS WARMUP -> "mean_us" (rank 0)

tcp: a blocking ping-pong on a TCP_NODELAY socket (sendall, then recv_into until the whole message is
in), as sockperf's ping-pong and commbench -t tcp --poll blocking; tcp-stream: osu_bw's loop over one
socket (windows of 64 messages sent with sendall, received with recv_into into one buffer, a 4 B ack),
windows for SECONDS after one second's warm-up, MB/s over the timed windows. mpi-bw: OMB-Py's osu_bw loop (64
Isend of one buffer, Waitall, a 4 B ack), MB/s from the whole timed loop as OMB-Py and commbench
compute it. allreduce: OMB-Py's osu_allreduce loop (Allreduce of float32, MPI.SUM), the mean over
ranks of each rank's mean call.
"""

from __future__ import annotations

import socket
import statistics
import sys
import time


def stamped(step, n: int) -> list[int]:
    """n calls of step, each timed alone (commbench's harness.timed_loop, without numpy)."""
    stamps = [0] * (2 * n)
    clock = time.perf_counter_ns
    for i in range(0, 2 * n, 2):
        stamps[i] = clock()
        step()
        stamps[i + 1] = clock()
    return [stamps[i + 1] - stamps[i] for i in range(0, 2 * n, 2)]


def recv_exactly(sock: socket.socket, view: memoryview) -> None:
    """The whole message: MSG_WAITALL (the kernel wakes the receiver once it is all in, as commbench's
    tcp transport and most MPI libraries' TCP paths receive), recv_into again only if a signal cut it."""
    got = 0
    while got < len(view):
        k = sock.recv_into(view[got:], len(view) - got, socket.MSG_WAITALL)
        if not k:
            raise ConnectionError("peer closed")
        got += k


def tcp_server(port: int) -> None:
    with socket.create_server(("127.0.0.1", port)) as listener:
        conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    size = int.from_bytes(conn.recv(8), "little")
    conn.sendall(b"ok")
    buf = memoryview(bytearray(size))
    try:
        while True:
            recv_exactly(conn, buf)
            conn.sendall(buf)
    except ConnectionError:
        return


def tcp_client(port: int, size: int, iters: int, warmup: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(size.to_bytes(8, "little"))
    recv_exactly(sock, memoryview(bytearray(2)))
    out = bytearray((i * 131 + 7) & 0xFF for i in range(size))
    inbox = memoryview(bytearray(size))

    def step() -> None:
        sock.sendall(out)
        recv_exactly(sock, inbox)

    stamped(step, warmup)
    ns = stamped(step, iters)
    sock.close()
    print(f"{statistics.fmean(ns) / 2e3:.3f} {statistics.median(ns) / 2e3:.3f}", flush=True)


def tcp_sink(port: int) -> None:
    with socket.create_server(("127.0.0.1", port)) as listener:
        conn, _ = listener.accept()
    size = int.from_bytes(conn.recv(8), "little")
    conn.sendall(b"ok")
    buf = memoryview(bytearray(size))
    try:
        while True:
            for _ in range(64):
                recv_exactly(conn, buf)
            conn.sendall(b"ack!")
    except ConnectionError:
        return


def tcp_stream(port: int, size: int, seconds: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(size.to_bytes(8, "little"))
    recv_exactly(sock, memoryview(bytearray(2)))
    out, ack = bytearray((i * 131 + 7) & 0xFF for i in range(size)), memoryview(bytearray(4))

    def window() -> None:
        for _ in range(64):
            sock.sendall(out)
        recv_exactly(sock, ack)

    for deadline in (1.0, float(seconds)):  # a warm-up, then the timed windows (the last counts kept)
        t0, n, ns = time.perf_counter(), 0, 0
        while time.perf_counter() - t0 < deadline:
            ns += stamped(window, 1)[0]
            n += 1
    sock.close()
    print(f"{size * 64 * n / (ns / 1e9) / 1e6:.3f}", flush=True)


def mpi_bw(size: int, windows: int, warmup: int) -> None:
    import numpy as np
    from mpi4py import MPI

    comm, window = MPI.COMM_WORLD, 64
    buf, ack = np.full(size, 7, dtype=np.uint8), np.zeros(4, dtype=np.uint8)
    spec, ack_spec = [buf, size, MPI.BYTE], [ack, 4, MPI.BYTE]
    requests = [MPI.REQUEST_NULL] * window
    if comm.rank == 0:
        def step() -> None:
            for j in range(window):
                requests[j] = comm.Isend(spec, 1, 100)
            MPI.Request.Waitall(requests)
            comm.Recv(ack_spec, 1, 101)
    else:
        def step() -> None:
            for j in range(window):
                requests[j] = comm.Irecv(spec, 0, 100)
            MPI.Request.Waitall(requests)
            comm.Send(ack_spec, 0, 101)
    comm.Barrier()
    stamped(step, warmup)
    t0 = time.perf_counter_ns()
    stamped(step, windows)
    wall = time.perf_counter_ns() - t0
    if comm.rank == 0:
        print(f"{size * window * windows / (wall / 1e9) / 1e6:.3f}", flush=True)


def allreduce(size: int, iters: int, warmup: int) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    send, recv = np.ones(max(1, size // 4), dtype=np.float32), np.zeros(max(1, size // 4), dtype=np.float32)
    s_msg, r_msg = [send, size // 4, MPI.FLOAT], [recv, size // 4, MPI.FLOAT]

    def step() -> None:
        comm.Allreduce(s_msg, r_msg, op=MPI.SUM)

    comm.Barrier()
    stamped(step, warmup)
    mean_us = statistics.fmean(stamped(step, iters)) / 1e3
    comm.Barrier()
    total = comm.reduce(mean_us, op=MPI.SUM, root=0)
    if comm.rank == 0:
        print(f"{total / comm.size:.3f}", flush=True)


if __name__ == "__main__":
    what, *nums = sys.argv[1:]
    args = [int(x) for x in nums]
    {"tcp-server": tcp_server, "tcp-client": tcp_client, "tcp-sink": tcp_sink, "tcp-stream": tcp_stream,
     "mpi-bw": mpi_bw, "allreduce": allreduce}[what](*args)
