"""The parameter-server emulator sending what TensorFlow's PS training sends (``ps-throughput --rpc tf``).

Measured on the wire (``train --traffic``, TF 2.21 ParameterServerStrategy with a ClusterCoordinator,
Keras 3 SGD with momentum; docs/training.md), one worker-step is, in RPCs by caller:

- chief -> worker: 3 Enqueue (the closure's function and inputs, 274 + 46 B per variable it
  captures), a RunComponentFunction that returns when the worker's step is done, and a RecvTensor
  fetching the loss;
- worker -> each PS shard: an Enqueue and a RunComponentFunction (the shard's part of the step,
  140 + 140 B per variable there), a RecvTensor per variable on the shard (trainable or not), one
  for the shard's cross-device control edge, one per convolution kernel it holds (Keras reads those
  twice), and on the shard holding the optimizer's step counter, a read of it;
- PS shard -> worker: a RecvTensor per gradient of a variable it holds and per non-trainable
  variable it holds (batch-norm statistics), and on the step counter's shard one scalar: **the PS
  calls the worker** for gradients; nothing is pushed;
- PS shard -> the shard holding the learning rate (2 shards or more): a read of it per trainable
  variable it updates.

Variables lie on shards in creation order, round-robin (TF's default), the step counter and the
learning rate after the model's variables. Each RPC is one call here, in that direction, with
TF's message sizes (request DATA less gRPC's 5-byte prefix): one RPC over gRPC's unary mode, one
round trip elsewhere. A worker-step goes: the worker enqueues on every shard, reads all its
variables at once (every read in flight together, on every shard's link: ``Transport.calls``, as
TF's step function issues its RecvTensor calls), answers the shards' gradient reads (each shard
makes its reads at once; the worker answers the shards side by side), then calls each shard's
function, in which the shard applies what it read (``var -= lr * grad``, on arrival, as TF's
asynchronous PS training) and reads the learning rate. Pull and push times are those of the calls
made at once: a worker's reads of a step, a shard's gradient reads from one worker. The chief runs
the steps in rounds of one per worker (W closures, then join),
as ``train --strategy ps`` does; a round is what it times. A rank serving several peers serves
each from a thread of its own, so no rank waits on a rank that waits on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from commbench.core.measure.message import Message
from commbench.core.measure.samples import Samples
from commbench.emulators.ps import LR, floats, gradient_value, run_threads
from commbench.transports.base import Link, Transport

# message sizes (bytes of the message: the DATA TF's gRPC sends, less its 5-byte prefix)
READ_REQUEST, PULL_REQUEST, LR_REQUEST = 177, 145, 156  # RecvTensorRequests: worker, PS, PS -> PS
FETCH_REQUEST, FN_REQUEST = 139, 271  # chief -> worker: the loss, the step's function
SHARD_ENQUEUE = 24
STEP_COUNTER, TOKEN, LR_VALUE, LOSS, ACK = 23, 21, 19, 19, 2  # int64, a 4-byte scalar each, an Enqueue reply
ENQUEUES = 3


def enqueue_request(variables: int) -> int:
    return 269 + 46 * variables


def shard_fn_request(variables: int) -> int:
    return 135 + 140 * variables


@dataclass
class Variable:
    nbytes: int
    trainable: bool = True
    conv: bool = False  # a convolution kernel: read a second time


@dataclass
class ShardPlan:
    """What one shard holds and what crosses each of its links per worker-step."""

    index: int
    variables: list[Variable] = field(default_factory=list)
    step_counter: bool = False
    learning_rate: bool = False

    def reads(self) -> list[int]:
        """Sizes the worker reads from this shard: variables, control token, kernels again, counter."""
        return [v.nbytes for v in self.variables] + [TOKEN] + [TOKEN for v in self.variables if v.conv] + \
            ([STEP_COUNTER] if self.step_counter else [])

    def pulls(self) -> list[int]:
        """Sizes this shard reads from each worker: gradients and statistics, and a scalar."""
        return [v.nbytes for v in self.variables] + ([STEP_COUNTER] if self.step_counter else [])

    def lr_reads(self) -> int:
        """Reads of the learning rate from its shard, one per trainable variable updated here."""
        return 0 if self.learning_rate else sum(v.trainable for v in self.variables)


def variables_of(profile) -> list[Variable]:
    """A profile's variables in creation order, trainable or not; Keras reads convolution kernels
    (not depthwise ones) a second time."""
    return [Variable(t.nbytes, t.trainable, len(t.shape) == 4 and t.name.endswith("/kernel")
                     and "depthwise" not in t.name) for t in profile.variables]


def plan(variables: Sequence[Variable], shards: int, owners: Sequence[int] | None = None) -> list[ShardPlan]:
    """Shards' plans: variables on ``owners`` (default round-robin in creation order), then the step
    counter and the learning rate round-robin after them, as TF creates and places them."""
    out = [ShardPlan(k) for k in range(shards)]
    for i, v in enumerate(variables):
        out[owners[i] if owners is not None else i % shards].variables.append(v)
    out[len(variables) % shards].step_counter = True
    out[(len(variables) + 1) % shards].learning_rate = True
    return out


def rpcs_per_worker_step(plans: Sequence[ShardPlan]) -> int:
    """Every role pair's calls of one worker-step."""
    return ENQUEUES + 2 + sum(2 + len(p.reads()) + len(p.pulls()) + p.lr_reads() for p in plans)


def requests(n: int, nbytes: int) -> list[Message]:
    """n request messages of one size: calls made at once each carry their own (their index in it)."""
    return [Message((nbytes,)) for _ in range(n)]


class Chief:
    """Rank 0: a round is one step of every worker, each driven from a thread of its own."""

    def __init__(self, workers: Sequence[int], links: dict[int, Link], variables: int) -> None:
        self.workers, self.links = list(workers), links
        self.enqueue, self.fn = Message((enqueue_request(variables),)), Message((FN_REQUEST,))
        self.fetch = Message((FETCH_REQUEST,))
        self.acks = {w: (Message((ACK,)), Message((0,)), Message((LOSS,))) for w in self.workers}

    def _drive(self, w: int) -> None:
        link, (ack, done, loss) = self.links[w], self.acks[w]
        for _ in range(ENQUEUES):
            link.call(self.enqueue, ack)
        link.call(self.fn, done)  # returns when the worker's step is done
        link.call(self.fetch, loss)

    def round(self) -> None:
        run_threads([lambda w=w: self._drive(w) for w in self.workers])


class Worker:
    """A worker: serves the chief; each step reads from the shards, answers their gradient reads, and
    calls each shard's function."""

    def __init__(self, index: int, chief: int, shards: dict[int, ShardPlan], links: dict[int, Link],
                 variables: int, transport: Transport) -> None:
        self.chief, self.links, self.shards = chief, links, dict(sorted(shards.items()))
        self.transport = transport
        self.reads = {r: [Message((n,)) for n in p.reads()] for r, p in self.shards.items()}
        self.batch = [(links[r], requests(len(m), READ_REQUEST), m) for r, m in self.reads.items()]
        self.grads = {r: [Message((n,)) for n in p.pulls()] for r, p in self.shards.items()}
        for ms in self.grads.values():
            for m in ms:
                for f in floats(m):
                    f.fill(gradient_value(index))
        self.fns = {r: Message((shard_fn_request(len(p.variables)),)) for r, p in self.shards.items()}
        self.pull_reqs = {r: Message((PULL_REQUEST,)) for r in self.shards}  # one each: served side by side
        self.enqueue = Message((SHARD_ENQUEUE,))
        self.ack, self.done = Message((ACK,)), Message((0,))
        self.from_chief = (Message((enqueue_request(variables),)), Message((FN_REQUEST,)), Message((FETCH_REQUEST,)))
        self.loss = Message((LOSS,))
        self.pull_ns = Samples()

    def start(self, n: int) -> None:
        self.pull_ns = Samples(n)

    def step(self) -> Message:
        for r in self.reads:
            self.links[r].call(self.enqueue, self.ack)
        t = time.perf_counter_ns()
        self.transport.calls(self.batch)  # every variable read at once
        self.pull_ns.add(time.perf_counter_ns() - t)
        serve = self.transport.serve_calls  # each shard reads its gradients at once; answered side by side
        run_threads([lambda r=r, g=g: serve(self.links[r], self.pull_reqs[r], g) for r, g in self.grads.items()])
        for r, fn in self.fns.items():
            self.links[r].call(fn, self.done)
        return self.done

    def run(self, n: int) -> None:
        chief = self.links[self.chief]
        enqueue, fn, fetch = self.from_chief
        for _ in range(n):
            chief.serve(ENQUEUES, enqueue, self.ack)
            chief.serve(1, fn, self.step)
            chief.serve(1, fetch, self.loss)


class Shard:
    """A PS shard: a thread per worker (and, holding the learning rate, per other shard) serving it."""

    def __init__(self, me: int, plans: dict[int, ShardPlan], workers: Sequence[int], links: dict[int, Link],
                 transport: Transport) -> None:
        self.me, self.workers, self.links, self.transport = me, list(workers), links, transport
        self.plan = plans[me]
        self.lr_shard = next(r for r, p in plans.items() if p.learning_rate)
        self.peers = [r for r in plans if r != me]
        self.lr_reads_of = {r: q.lr_reads() for r, q in plans.items()}
        self.lock = threading.Lock()  # the variables, updated from every worker's thread
        self.lr_lock = threading.Lock()  # the one link to the learning rate's shard, called from each of them
        self.vars = [Message((v.nbytes,)) for v in self.plan.variables]
        for v in self.vars:
            v.clear()
        self.var_f = [floats(v) for v in self.vars]
        self.trainable = [v.trainable for v in self.plan.variables]
        self.steps = 0
        self.push_ns: list[Samples] = []

    def _serve_worker(self, w: int, n: int, record: list[int]) -> None:
        link, p = self.links[w], self.plan
        reads = [Message((x,)) for x in p.reads()]
        reads[:len(self.vars)] = self.vars  # the variables themselves, read as they are
        grads = [Message((x,)) for x in p.pulls()]
        grad_f = [floats(g) for g in grads[:len(self.vars)]]
        req, enqueue = Message((READ_REQUEST,)), Message((SHARD_ENQUEUE,))
        pulls = [(link, requests(len(grads), PULL_REQUEST), grads)]
        calls, serve_calls = self.transport.calls, self.transport.serve_calls
        ack, done, fn = Message((ACK,)), Message((0,)), Message((shard_fn_request(len(p.variables)),))
        to_lr = self.links[self.lr_shard] if self.lr_shard != self.me else None
        lr = [Message((LR_VALUE,)) for _ in range(p.lr_reads())]
        lr_reads = [(to_lr, requests(len(lr), LR_REQUEST), lr)] if lr else []
        rate = np.float32(LR)

        def apply() -> Message:
            with self.lock:
                for var, g, trainable in zip(self.var_f, grad_f, self.trainable, strict=True):
                    if trainable:
                        for v, d in zip(var, g, strict=True):
                            v -= d * rate
            if lr_reads:  # the update reads the learning rate where it lives, once per variable, at once
                with self.lr_lock:  # one batch of calls on a link at a time (a stream: one write outstanding)
                    calls(lr_reads)
            return done

        for _ in range(n):
            link.serve(1, enqueue, ack)
            serve_calls(link, req, reads)
            t = time.perf_counter_ns()
            calls(pulls)  # every gradient read at once
            record.add(time.perf_counter_ns() - t)
            link.serve(1, fn, apply)

    def run(self, n: int) -> None:
        self.push_ns = [Samples(n) for _ in self.workers]
        jobs: list[Callable[[], None]] = [lambda w=w, rec=rec: self._serve_worker(w, n, rec)
                                          for w, rec in zip(self.workers, self.push_ns, strict=True)]
        if self.plan.learning_rate:  # the others' updates read the learning rate here
            for other in self.peers:
                reads = n * len(self.workers) * self.lr_reads_of[other]
                if reads:
                    jobs.append(lambda o=other, k=reads: self.links[o].serve(k, Message((LR_REQUEST,)),
                                                                            Message((LR_VALUE,))))
        run_threads(jobs)
        self.steps += n

    def value(self) -> float | None:
        """The first trainable variable's first element (what every element should hold)."""
        for var, t in zip(self.var_f, self.trainable, strict=True):
            if t and len(var[0]):
                return float(var[0][0])
        return None

    def wrong(self) -> int:
        """Trainable variables whose value is not every worker's every gradient applied once."""
        want = np.float32(-self.steps * len(self.workers) * (len(self.workers) + 1) / 4096)
        return sum(int(np.count_nonzero(f != want)) for var, t in zip(self.var_f, self.trainable, strict=True) if t
                   for f in var)
