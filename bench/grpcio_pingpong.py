"""A plain grpcio ping-pong (no commbench): the script bench/vs_grpc_cpp.py holds commbench's grpc
transport to. Same wire as bench/grpc_pingpong.cc: generic raw-bytes methods /cb.Ref/Unary (one
call per round trip) and /cb.Ref/Stream (a bidi stream echoing every message).

    python bench/grpcio_pingpong.py server PORT [copy]
    python bench/grpcio_pingpong.py client HOST:PORT unary|stream SIZE ITERATIONS WARMUP [copy]

The client prints "size p50_one_way_us mean_one_way_us" (one way = round trip / 2). With ``copy``
both ends do the two copies a transport that delivers into the caller's buffers must do with grpcio
(as bench/grpc_pingpong.cc's copy mode does for C++): the message is built from a buffer into
``bytes`` before each send (grpcio sends only bytes) and each received message is copied into a
preallocated buffer.
"""

from __future__ import annotations

import queue
import statistics
import sys
import threading
import time
from concurrent import futures

import grpc

OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


def serve(port: str, copy: bool) -> None:
    inbox = bytearray(1 << 23)

    def echo(request: bytes) -> bytes:
        if not copy:
            return request
        view = memoryview(inbox)[:len(request)]
        view[:] = request
        return bytes(view)

    def unary(request: bytes, context) -> bytes:
        return echo(request)

    def stream(requests, context):
        for request in requests:
            yield echo(request)

    handler = grpc.method_handlers_generic_handler("cb.Ref", {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Stream": grpc.stream_stream_rpc_method_handler(stream)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=OPTIONS)
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("listening", flush=True)
    server.wait_for_termination()


def client(target: str, kind: str, size: int, iters: int, warmup: int, copy: bool) -> None:
    channel = grpc.insecure_channel(target, options=OPTIONS)
    payload = bytes((i * 131 + 7) & 0xFF for i in range(min(size, 4096))) * (size // 4096 + 1)
    payload = payload[:size]
    source, inbox = bytearray(payload), memoryview(bytearray(size))
    clock, samples = time.perf_counter_ns, [0] * iters
    if kind == "unary":
        call = channel.unary_unary("/cb.Ref/Unary")
        for i in range(warmup + iters):
            t0 = clock()
            if copy:
                inbox[:] = call(bytes(source))
            else:
                reply = call(payload)
            t1 = clock()
            if i >= warmup:
                samples[i - warmup] = t1 - t0
    else:
        q: queue.SimpleQueue = queue.SimpleQueue()
        replies = channel.stream_stream("/cb.Ref/Stream")(iter(q.get, None))
        for i in range(warmup + iters):
            t0 = clock()
            if copy:
                q.put(bytes(source))
                inbox[:] = next(replies)
            else:
                q.put(payload)
                reply = next(replies)
            t1 = clock()
            if i >= warmup:
                samples[i - warmup] = t1 - t0
        q.put(None)
    assert len(inbox if copy else reply) == size
    print(f"{size} {statistics.median(samples) / 2e3:.3f} {statistics.fmean(samples) / 2e3:.3f}", flush=True)
    channel.close()


if __name__ == "__main__":
    threading.current_thread().name = "main"
    copy = sys.argv[-1] == "copy"
    args = sys.argv[:-1] if copy else sys.argv
    if len(args) == 3 and args[1] == "server":
        serve(args[2], copy)
    elif len(args) == 7 and args[1] == "client":
        client(args[2], args[3], int(args[4]), int(args[5]), int(args[6]), copy)
    else:
        sys.exit(__doc__)
