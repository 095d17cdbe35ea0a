"""The parameter-server emulator's two roles, over any transport.

Every step (sync mode, as TensorFlow's SyncReplicasOptimizer): each worker pushes its gradients
for each shard's variables (a call, acked on receipt), each shard adds the W pushes up and really
applies ``var -= lr * sum / W`` with numpy, then each worker pulls the updated variables. Workers
push to and pull from the shards in shard order, and shards serve workers in worker order, so no
rank ever waits on a rank that waits on it, whatever the transport.

Async mode (as TensorFlow's default asynchronous training): each shard serves each worker from a
thread of its own and applies every push on arrival, ``var -= lr * grad``; workers push and pull
without waiting for each other (pulls may read a variable while another worker's update lands).

Worker w's gradient is the constant (w + 1) / 1024 and lr = 0.5, so every value is exact in
float32 by construction: the W pushes sum to W (W + 1) / 2048 exactly, the mean is a correctly
rounded division whose true value is representable, so after k steps every variable is exactly
-k (W + 1) / 4096 in sync mode (workers check each pull with ``--validate``) and -k W (W + 1) / 4096
in async mode, whatever the order (shards check), for every W while k W (W + 1) < 2^24.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from commbench.core.measure import buffers
from commbench.core.measure.message import Message
from commbench.core.measure.samples import Samples
from commbench.transports.base import Link

LR = 0.5
CONTROL = (8,)  # pull requests and push acks


def floats(msg: Message) -> list[np.ndarray]:
    """The float32 view of each buffer (a buffer's last size % 4 bytes carry no variable)."""
    return [a[: len(a) // 4 * 4].view(np.float32) for a in msg.arrays]


def gradient_value(worker: int) -> float:
    return (worker + 1) / 1024


def expected_value(steps: int, workers: int, asynchronous: bool = False) -> float:
    return -steps * (workers + 1) / 4096 * (workers if asynchronous else 1)


def split(msg: Message, per_tensor: bool) -> list[Message]:
    """The message itself, or one message per tensor over the same memory (TF sends each tensor as
    its own RPC: RecvTensor for gradients, one read per variable)."""
    return [Message.over([a]) for a in msg.arrays] if per_tensor else [msg]


def run_threads(jobs: Sequence[Callable[[], None]]) -> None:
    """Run each job in a thread of its own (one job: in this one); the first error is re-raised here."""
    if len(jobs) == 1:
        return jobs[0]()
    errors: list[BaseException] = []

    def run(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as exc:
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(j,), daemon=True) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


class Shard:
    def __init__(self, sizes: list[int], workers: list[int], links: dict[int, Link],
                 asynchronous: bool = False, per_tensor: bool = False) -> None:
        self.asynchronous = asynchronous
        self.per_tensor = per_tensor
        self.lock = threading.Lock()
        self.workers = workers
        self.links = links
        self.vars = Message(sizes)
        self.vars.clear()  # every variable starts at 0
        self.grad = Message(sizes)
        self.var_f, self.grad_f = floats(self.vars), floats(self.grad)
        self.acc = [buffers.array(len(v)) for v in self.var_f]
        for acc in self.acc:
            acc.fill(0)
        self.ack, self.req = Message(CONTROL), Message(CONTROL)
        self.steps = 0
        self.grad_parts, self.var_parts = split(self.grad, per_tensor), split(self.vars, per_tensor)
        # one accumulate per part: all tensors for a packed push, tensor i for a per-tensor one
        self.spans = [range(len(sizes))] if not per_tensor else [range(i, i + 1) for i in range(len(sizes))]
        self.accumulators = [self._accumulate(span) for span in self.spans]

    def _accumulate(self, span: range):
        def accumulate() -> Message:
            for i in span:
                np.add(self.acc[i], self.grad_f[i], out=self.acc[i])
            return self.ack
        return accumulate

    def step(self) -> None:
        for w in self.workers:
            for part, accumulate in zip(self.grad_parts, self.accumulators, strict=True):
                self.links[w].serve(1, part, accumulate)
        nw, lr = np.float32(len(self.workers)), np.float32(LR)
        for var, acc in zip(self.var_f, self.acc, strict=True):
            # the mean by a division: correctly rounded, so exact whenever the true mean is representable
            # (multiplying by a rounded LR / W was not: W = 13, 14, 26, ... drifted)
            np.divide(acc, nw, out=acc)
            acc *= lr
            var -= acc
            acc.fill(0)
        self.steps += 1
        for w in self.workers:
            for part in self.var_parts:
                self.links[w].serve(1, self.req, part)

    def run_async(self, n: int) -> None:
        """n steps of every worker, each worker served by its own thread, updates applied on arrival."""
        def serve(w: int) -> None:
            grad = Message(self.grad.sizes)
            grad_f = floats(grad)
            ack, req = Message(CONTROL), Message(CONTROL)
            parts = split(grad, self.per_tensor)

            def apply(span: range):
                def applied() -> Message:
                    with self.lock:
                        for i in span:
                            self.var_f[i] -= grad_f[i] * np.float32(LR)
                    return ack
                return applied
            appliers = [apply(span) for span in self.spans]
            for _ in range(n):
                for part, applied in zip(parts, appliers, strict=True):
                    self.links[w].serve(1, part, applied)
                for part in self.var_parts:
                    self.links[w].serve(1, req, part)

        run_threads([partial(serve, w) for w in self.workers])
        self.steps += n

    def wrong(self) -> int:
        """Variables whose value is not what the pushed updates imply."""
        want = np.float32(expected_value(self.steps, len(self.workers), self.asynchronous))
        return sum(int(np.count_nonzero(v != want)) for v in self.var_f)


class Worker:
    def __init__(self, rank: int, nworkers: int, shard_sizes: dict[int, list[int]], links: dict[int, Link],
                 validate: bool, asynchronous: bool = False, corrupt_every: int = 0, per_tensor: bool = False) -> None:
        self.asynchronous = asynchronous
        self.shards = sorted(shard_sizes)
        self.links = links
        self.nworkers = nworkers
        self.grads = {s: Message(sz) for s, sz in shard_sizes.items()}
        for m in self.grads.values():
            for f in floats(m):
                f.fill(gradient_value(rank))
        self.vars = {s: Message(sz) for s, sz in shard_sizes.items()}
        self.ack, self.req = Message(CONTROL), Message(CONTROL)
        self.validate = validate
        self.steps = 0
        self.wrong = 0
        self.push_ns, self.pull_ns = Samples(), Samples()
        self.corrupt_every = corrupt_every  # test hook: every Nth push carries one flipped byte
        self.pushes = 0
        # (shard, message) per RPC of a step, in order: one per shard, or one per tensor
        self.by_shard = [(s, split(self.grads[s], per_tensor), split(self.vars[s], per_tensor)) for s in self.shards]
        self.push_rpcs = [(s, m) for s, pushes, _ in self.by_shard for m in pushes]
        self.pull_rpcs = [(s, m) for s, _, pulls in self.by_shard for m in pulls]

    def start(self, n: int) -> None:
        """Preallocate this run's per-RPC timings."""
        self.push_ns = Samples(n * len(self.push_rpcs))
        self.pull_ns = Samples(n * len(self.pull_rpcs))

    def step(self) -> None:
        if self.asynchronous:
            return self.step_async()
        clock, links = time.perf_counter_ns, self.links
        if self.corrupt_every:
            for s, m in self.push_rpcs:
                self.push_corrupted(s, m)
        else:
            for s, m in self.push_rpcs:
                t = clock()
                links[s].call(m, self.ack)
                self.push_ns.add(clock() - t)
        for s, m in self.pull_rpcs:
            t = clock()
            links[s].call(self.req, m)
            self.pull_ns.add(clock() - t)
        self.steps += 1
        if self.validate:  # sync: every pull must show exactly this step's value
            want = np.float32(expected_value(self.steps, self.nworkers))
            for m in self.vars.values():
                self.wrong += any(bool(np.any(f != want)) for f in floats(m))

    def push_corrupted(self, shard: int, msg: Message) -> None:
        """The test hook's push: every Nth one with a byte of its first gradient flipped (then restored)."""
        self.pushes += 1
        arr = msg.arrays[0]
        bad = self.pushes % self.corrupt_every == 0 and len(arr) > 0
        if bad:
            arr[len(arr) // 2] ^= 0xFF
        t = time.perf_counter_ns()
        self.links[shard].call(msg, self.ack)
        self.push_ns.add(time.perf_counter_ns() - t)
        if bad:
            arr[len(arr) // 2] ^= 0xFF

    def step_async(self) -> None:
        """Push everything to a shard, then pull everything from it, shard after shard; no step barrier
        among workers."""
        clock, links = time.perf_counter_ns, self.links
        for s, pushes, pulls in self.by_shard:
            for m in pushes:
                t = clock()
                links[s].call(m, self.ack)
                self.push_ns.add(clock() - t)
            for m in pulls:
                t = clock()
                links[s].call(self.req, m)
                self.pull_ns.add(clock() - t)
        self.steps += 1
