"""A plain TensorFlow ping-pong (no commbench): the script bench/vs_tf_grpc.py holds the tf-grpc
transport to. Two TF tasks on loopback; task 0 runs a ``tf.function`` that moves one tensor to task 1
and back K times (unrolled, grappler off, as the tf-grpc transport does) and times N calls of it.

    python bench/tf_pingpong.py SIZE K ITERATIONS WARMUP

Prints "size k p50_one_way_us mean_one_way_us" (one way = a call's time / (2 K)). With K = 1 every
transfer also carries the cost of running a function; with K large, only TensorFlow's per-transfer
cost remains (its executor, rendezvous and one RecvTensor RPC per transfer).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from common import free_port  # bench/ is on sys.path

from commbench.core.imports import import_tensorflow  # TensorFlow with its start-up notices dropped


def main() -> None:
    if sys.argv[1] == "server":
        tf = import_tensorflow("TensorFlow is not installed: pip install 'commbench[tf]'")
        cluster = tf.train.ClusterSpec({"worker": sys.argv[2:4]})
        tf.distribute.Server(cluster, job_name="worker", task_index=1, protocol="grpc").join()
        return
    size, k, iters, warmup = map(int, sys.argv[1:5])
    ends = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    server = subprocess.Popen([sys.executable, __file__, "server", *ends])
    try:
        tf = import_tensorflow("TensorFlow is not installed: pip install 'commbench[tf]'")
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
        tf.config.experimental_connect_to_cluster(tf.train.ClusterSpec({"worker": ends}), job_name="worker",
                                                  task_index=0, protocol="grpc")
        local, remote = "/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0"

        @tf.function
        def trips(x):
            for _ in range(k):
                with tf.device(remote):
                    x = tf.identity(x)
                with tf.device(local):
                    x = tf.identity(x)
            return x

        with tf.device(local):
            x = tf.constant(bytes(range(256)) * (size // 256) + bytes(size % 256))
            x = tf.io.decode_raw(x, tf.uint8)
        us = []
        for i in range(warmup + iters):
            t0 = time.perf_counter_ns()
            trips(x).numpy()
            if i >= warmup:
                us.append((time.perf_counter_ns() - t0) / 1e3 / (2 * k))
        print(f"{size} {k} {statistics.median(us):.3f} {statistics.fmean(us):.3f}", flush=True)
    finally:
        server.kill()
        server.wait()
    os._exit(0)  # skip TF's teardown: it would call the server just stopped


if __name__ == "__main__":
    main()
