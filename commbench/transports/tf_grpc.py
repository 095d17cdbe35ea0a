"""TensorFlow's own C++ gRPC runtime as a reference transport (p2p-latency, p2p-bandwidth).

Two TF tasks (``/job:worker`` 0 and 1): rank 1 runs a ``tf.distribute.Server``; rank 0 joins the
cluster as task 0 and drives both from ``tf.function``s, as a training step does. A call sends the
message's buffers (one tensor each) to task 1 and back; a window of sends is one function that
moves every message of the window to task 1 and returns one byte per buffer. A timed latency step
is one function making up to ROUNDS round trips back to back (fewer for large or many-buffer
messages: ``rounds_per_function``), as a training step makes many transfers per function call: the
per-call cost of running a function (about 0.5 ms here) is spread over them, and one-way latency is
the step's time / (2 x round trips). Grappler is switched
off so that the cross-device identities are not folded away (naive versions measure nothing); the
buffers become tensors once, at their first send, so the timed path is TF's, not numpy's.
Rank 1 takes no part in a call: it cannot see or validate what arrives, and the tensors are constants
(content as of the first send, where validation changes content every iteration), so ``--validate``
is refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

import numpy as np

from commbench.core.config.options import Options
from commbench.core.errors import PeerError, UsageError
from commbench.core.imports import import_tensorflow, installed
from commbench.core.measure.message import Message
from commbench.transports import _tf_bind as tf_bind
from commbench.transports.base import Link, Transport

LOCAL, REMOTE = "/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0"
ROUNDS = 50  # round trips per tf.function in a timed latency step, at most
ROUND_BYTES = 1 << 20  # ... and at most about this many bytes moved per step
ROUND_OPS = 400  # ... and at most about this many identities per direction in the unrolled graph


def rounds_per_function(msg: Message) -> int:
    return max(1, min(ROUNDS, ROUND_BYTES // max(msg.nbytes, 1), ROUND_OPS // max(len(msg.sizes), 1)))


def _tf():
    return import_tensorflow("the tf-grpc transport runs TensorFlow, which is not installed here: "
                             "pip install 'commbench[tf]'")


class TfDriverLink(Link):
    """Rank 0's link: every operation is a tf.function run on both tasks."""

    def __init__(self, tf, peer: int, name: str) -> None:
        super().__init__(peer, name)
        self.tf = tf
        self.pending: list[Message] = []
        self._fns: dict[tuple, object] = {}

    def _traced(self, key: tuple, body, spec) -> object:
        """One tf.function per structure (round trips, buffers per message), its buffers of any length
        (one signature: no retracing per message size), traced here, before anything is timed."""
        fn = self._fns.get(key)
        if fn is None:
            fn = self._fns[key] = self.tf.function(body, input_signature=[spec])
            fn.get_concrete_function()
        return fn

    def _spec(self, n: int) -> list:
        return [self.tf.TensorSpec([None], self.tf.uint8)] * n

    def rounds(self, k: int, n: int):
        """A tf.function making k round trips back to back with n buffers (unrolled: a while loop across
        tasks costs control messages of its own each iteration, twice the time here)."""
        tf = self.tf

        def fn(xs):
            for _ in range(k):
                with tf.device(REMOTE):
                    xs = [tf.identity(x) for x in xs]
                with tf.device(LOCAL):
                    xs = [tf.identity(x) for x in xs]
            return xs

        return self._traced(("rounds", k, n), fn, self._spec(n))

    def window(self, shape: tuple[int, ...]):
        """A tf.function moving a window of messages (``shape``: buffers per message) to task 1, and
        one byte per buffer back."""
        tf = self.tf

        def fn(batches):
            with tf.device(REMOTE):
                tails = [x[-1:] for xs in batches for x in xs]
            with tf.device(LOCAL):
                return tf.concat([tf.identity(t) for t in tails], 0)

        return self._traced(("window", shape), fn, [self._spec(n) for n in shape])

    def calls_per_caller(self, request: Message) -> int:
        return rounds_per_function(request)

    def caller(self, request: Message, reply: Message):
        fn = self.rounds(rounds_per_function(request), len(request.sizes))
        return partial(self._trips, fn, self.tensors(request), reply.arrays)

    def _trips(self, fn, xs: list, arrays: list) -> None:
        """Run a round-trip function on the request's tensors; what came back into the reply's arrays."""
        for a, t in zip(arrays, self._run(fn, xs), strict=True):
            a[:] = t.numpy()

    def tensors(self, msg: Message) -> list:
        t = msg.cache.get("tf")
        if t is None:
            with self.tf.device(LOCAL):
                t = msg.cache["tf"] = [self.tf.constant(a) for a in msg.arrays]
        return t

    def _run(self, fn, *args):
        try:
            return fn(*args)
        except self.tf.errors.OpError as exc:
            raise PeerError(f"TensorFlow could not reach {self.name}: {exc.message.splitlines()[0]}") from None

    def call(self, request: Message, reply: Message) -> None:
        self._trips(self.rounds(1, len(request.sizes)), self.tensors(request), reply.arrays)

    def send(self, msg: Message) -> None:
        self.pending.append(msg)  # a window goes as one function at the next receive

    def recv_into(self, msg: Message) -> None:
        if self.pending:
            batches, self.pending = [self.tensors(m) for m in self.pending], []
            self._run(self.window(tuple(map(len, batches))), batches).numpy()
        msg.clear()  # the ack: nothing comes from rank 1 itself

    def serve(self, n, request, respond) -> None:
        raise PeerError("tf-grpc: rank 0 drives, it does not serve")


class TfServerLink(Link):
    """Rank 1's link: its TF server does the work; the benchmark's calls here have nothing to do."""

    def send(self, msg: Message) -> None:
        pass

    def recv_into(self, msg: Message) -> None:
        pass

    def serve(self, n, request, respond) -> None:
        pass


class TfGrpcTransport(Transport):
    name = "tf-grpc"
    help = "TensorFlow's own C++ gRPC runtime: two TF tasks, tensors moved by tf.function (reference)"
    poll_modes = ("blocking",)
    capabilities = frozenset({"call", "stream"})  # rank 0 drives two TF tasks; rank 1 is a bare server

    @classmethod
    def able(cls, opts: Options) -> frozenset[str]:
        """No ``validate``: it sends each message's tensors as they were at the first send (TF constants)
        and rank 1 is a bare TF server."""
        return (super().able(opts) - {"validate"}) | {"open-server"}

    @classmethod
    def check_usable(cls, opts: Options) -> None:
        if not installed("tensorflow"):
            _tf()

    @classmethod
    def prepare_process(cls, opts: Options) -> None:
        tf_bind.preload()  # TF's servers listen on every interface unless the bind() shim confines them

    def mode(self) -> str:
        return f"TF runtime, grappler off; latency: <= {ROUNDS} round trips per tf.function, timed together"

    def connect(self, peers: Iterable[int]) -> dict[int, Link]:
        world = self.world
        if world.size != 2:
            raise UsageError("the tf-grpc transport runs between two ranks")
        endpoints = tf_bind.endpoints(world, "tf-grpc")  # both tasks start a server (task 0's by connect_to_cluster)
        tf = _tf()
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
        cluster = tf.train.ClusterSpec({"worker": endpoints})
        peer = 1 - world.rank
        if world.rank == 1:
            self.server = tf.distribute.Server(cluster, job_name="worker", task_index=1, protocol="grpc", start=True)
            world.barrier("tf-grpc-up", patient=True)  # rank 0 may still be importing TensorFlow: alive, not late
            return {peer: TfServerLink(peer, world.describe(peer))}
        world.barrier("tf-grpc-up", patient=True)
        tf.config.experimental_connect_to_cluster(cluster, job_name="worker", task_index=0, protocol="grpc")
        link = TfDriverLink(tf, peer, world.describe(peer))
        probe = Message((8,))
        probe.arrays[0][:] = np.arange(8, dtype=np.uint8)
        back = Message((8,))
        link.call(probe, back)
        if not np.array_equal(back.arrays[0], probe.arrays[0]):
            raise PeerError("tf-grpc: a probe tensor came back changed")
        return {peer: link}
