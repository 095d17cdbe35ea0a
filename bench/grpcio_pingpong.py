"""A plain grpcio ping-pong (no commbench): the script bench/vs_grpc_cpp.py holds commbench's grpc
transport to. Same wire as bench/grpc_pingpong.cc: generic raw-bytes methods /cb.Ref/Unary (one
call per round trip) and /cb.Ref/Stream (a bidi stream echoing every message).

    python bench/grpcio_pingpong.py server PORT
    python bench/grpcio_pingpong.py client HOST:PORT unary|stream SIZE ITERATIONS WARMUP

The client prints "size p50_one_way_us mean_one_way_us" (one way = round trip / 2).
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


def serve(port: str) -> None:
    def unary(request: bytes, context) -> bytes:
        return request

    def stream(requests, context):
        yield from requests

    handler = grpc.method_handlers_generic_handler("cb.Ref", {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Stream": grpc.stream_stream_rpc_method_handler(stream)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=OPTIONS)
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("listening", flush=True)
    server.wait_for_termination()


def client(target: str, kind: str, size: int, iters: int, warmup: int) -> None:
    channel = grpc.insecure_channel(target, options=OPTIONS)
    payload = bytes((i * 131 + 7) & 0xFF for i in range(min(size, 4096))) * (size // 4096 + 1)
    payload = payload[:size]
    clock, samples = time.perf_counter_ns, [0] * iters
    if kind == "unary":
        call = channel.unary_unary("/cb.Ref/Unary")
        for i in range(warmup + iters):
            t0 = clock()
            reply = call(payload)
            t1 = clock()
            if i >= warmup:
                samples[i - warmup] = t1 - t0
    else:
        q: queue.SimpleQueue = queue.SimpleQueue()
        replies = channel.stream_stream("/cb.Ref/Stream")(iter(q.get, None))
        for i in range(warmup + iters):
            t0 = clock()
            q.put(payload)
            reply = next(replies)
            t1 = clock()
            if i >= warmup:
                samples[i - warmup] = t1 - t0
        q.put(None)
    assert len(reply) == size
    print(f"{size} {statistics.median(samples) / 2e3:.3f} {statistics.fmean(samples) / 2e3:.3f}", flush=True)
    channel.close()


if __name__ == "__main__":
    threading.current_thread().name = "main"
    if len(sys.argv) == 3 and sys.argv[1] == "server":
        serve(sys.argv[2])
    elif len(sys.argv) == 7 and sys.argv[1] == "client":
        client(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        sys.exit(__doc__)
