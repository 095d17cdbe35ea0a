"""Real distributed TensorFlow training on synthetic data, with custom loops (Keras 3 ``model.fit``
fails under ParameterServerStrategy and MultiWorkerMirroredStrategy; custom loops work).

- ``ps``: the chief drives a ``ClusterCoordinator``; every step is one scheduled closure that a
  worker runs (pull variables from the PS tasks, compute, push gradients). Steps go in rounds of
  W closures followed by ``join()``, so a round is one step of every worker (synchronous-like, as
  ``ps-throughput --mode sync`` emulates) and its duration is the step time.
- ``mirrored``: every worker runs the same step; gradients are all-reduced (RING collectives).
Only this module imports TensorFlow.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from commbench.profiles.models import build, tensorflow


@dataclass
class StepTimes:
    ns: list[int]
    losses: list[float]
    devices: dict[str, str] = field(default_factory=dict)  # every model and optimizer variable: its device
    window: list[int] = field(default_factory=lambda: [0, 0])  # wall clock (ns) around the measured steps
    compute_before: list[float] | None = None  # mirrored: this worker's compute steps (ms) before training
    lags: list[list[float]] = field(default_factory=list)  # ps: per measured round, grads_lags' (ms)


PROBE_EVERY = 5  # ``between`` runs after every 5th measured step (ps: round), outside its clock
BURST = 3  # compute steps ``between`` times (train.py): the first right after a training step, then the pace


def build_in_scope(tf, model_name: str, lr: float):
    """(model, input shape, classes, optimizer) with every variable made inside the strategy's scope
    (the caller's ``with strategy.scope()``). Keras 3 makes an optimizer's slots (momentum) lazily, at
    its first apply_gradients, which under ParameterServerStrategy runs outside the scope: the slots
    would live on the chief and cross chief <-> PS every step (2.5x the bytes TF's PS training moves
    when they live on the PS). Building the optimizer here puts them where the strategy places variables."""
    model, shape, classes = image_model(model_name)
    opt = tf.keras.optimizers.SGD(lr, momentum=0.9)
    opt.build(model.trainable_variables)
    return model, shape, classes, opt


def sigterm_ends_the_process() -> None:
    """Give SIGTERM back its default action. TF's coordination service (MultiWorkerMirroredStrategy)
    takes SIGTERM for its preemption notice and the process lives on: a killed, timed-out or cancelled
    run kept training to its last step (105 s after the signal, measured). Call after TF's setup."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def variable_devices(model, opt) -> dict[str, str]:
    """Each model and optimizer variable's device, as TensorFlow placed it."""
    def device(v) -> str:
        for obj in (v, getattr(v, "value", None), getattr(v, "_value", None)):
            d = getattr(obj, "device", None)
            if isinstance(d, str) and d:
                return d
        return "unknown"
    return {getattr(v, "path", None) or v.name: device(v) for v in [*model.variables, *opt.variables]}


def image_model(name: str):
    """(model, input shape without batch, classes) for an image classifier."""
    model, _ = build(name)
    shape = model.input_shape
    if isinstance(shape, list) or len(shape) != 4:
        from commbench.core.errors import UsageError

        raise UsageError(f"train needs an image model (one 4-D input); {name} has inputs {shape}")
    return model, tuple(shape[1:]), int(model.output_shape[-1])


def synthetic(tf, shape: tuple, classes: int, batch: int, seed: int):
    """One fixed random batch, repeated: what the step costs, and a loss that falls as it is learnt."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, *shape), dtype=np.float32)
    y = rng.integers(0, classes, size=(batch,), dtype=np.int64)
    return tf.data.Dataset.from_tensors((x, y)).repeat()


class ComputeProbe:
    """One worker's training step on a model of its own, with no communication: built and traced once,
    then timed a step at a time (between training steps too: the compute time in the run's own conditions)."""

    def __init__(self, name: str, batch: int, seed: int) -> None:
        tf = tensorflow()
        model, shape, classes = image_model(name)
        opt = tf.keras.optimizers.SGD(0.01)
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        x, y = next(iter(synthetic(tf, shape, classes, batch, seed)))

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables,
                                    strict=True))
            return loss

        self._step = step
        for _ in range(3):
            step()

    def __call__(self) -> float:
        """One step's time (ms)."""
        t0 = time.perf_counter_ns()
        self._step().numpy()
        return (time.perf_counter_ns() - t0) / 1e6

    def steps(self, n: int = 12) -> list[float]:
        return [self() for _ in range(n)]


def _step_fn(tf, strategy, model, opt, per_replica_batch: int, stamp: bool = False):
    """A replica's training step, returning its loss; ``stamp``: [loss, the wall clock (s) on the
    replica's host once its every gradient is computed, as they leave for the PS], one float64 tensor
    (one output: the chief fetches it in as many calls as the loss alone, so the wire stays TF's)."""
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                            reduction=tf.keras.losses.Reduction.NONE)

    def replica(x, y):
        with tf.GradientTape() as tape:
            per_example = loss_fn(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=per_replica_batch *
                                              strategy.num_replicas_in_sync)
        grads = tape.gradient(loss, model.trainable_variables)
        if stamp:
            with tf.control_dependencies(grads):
                ready = tf.timestamp()
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return tf.stack([tf.cast(loss, tf.float64), ready]) if stamp else loss

    return replica


def grads_lags(ready_s: Sequence[float]) -> list[float]:
    """A round's workers' gradients-ready times (s) as how long before the last one each other worker's
    were ready (ms), earliest first: W - 1 numbers, what `predict` makes the gradients' crossing of the
    PS's link from (docs/training.md)."""
    t = sorted(ready_s)
    return [round((t[-1] - x) * 1e3, 3) for x in t[:-1]]


def run_ps(model_name: str, workers: int, batch: int, steps: int, warmup: int, seed: int, lr: float,
           tick: Callable[[int], None] = lambda n: None, between: Callable[[], None] = lambda: None) -> StepTimes:
    """On the chief: ParameterServerStrategy + ClusterCoordinator from TF_CONFIG. ``between`` runs after
    every PROBE_EVERY-th measured round, every closure joined (the workers idle). Every closure stamps
    when its gradients were ready (``_step_fn``): the round's ``grads_lags`` in ``lags``."""
    tf = tensorflow()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model, shape, classes, opt = build_in_scope(tf, model_name, lr)
    sigterm_ends_the_process()
    replica = _step_fn(tf, strategy, model, opt, batch, stamp=True)

    def dataset_fn():
        return synthetic(tf, shape, classes, batch, seed)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def step(it):
        x, y = next(it)
        return strategy.run(replica, args=(x, y))

    out = StepTimes([], [], variable_devices(model, opt))
    rounds = -(-steps // workers)
    first = -(-warmup // workers)
    for r in range(first + rounds):
        if r == first:
            out.window[0] = time.time_ns()
        t0 = time.perf_counter_ns()
        results = [coordinator.schedule(step, args=(iterator,)) for _ in range(workers)]
        coordinator.join()
        t = time.perf_counter_ns() - t0
        if r >= first:
            out.window[1] = time.time_ns()
            out.ns.append(t)
            fetched = [np.asarray(v.fetch(), dtype=np.float64) for v in results]  # each [loss, ready]
            out.losses.append(float(np.mean([f[0] for f in fetched])))
            out.lags.append(grads_lags([float(f[1]) for f in fetched]))
            tick(workers)  # after the round's clock stopped
            if (r - first) % PROBE_EVERY == PROBE_EVERY - 1:
                between()
    return out


def mirrored_strategy():
    """MultiWorkerMirroredStrategy with RING collectives, from TF_CONFIG: every worker's TF server and the
    coordination service come up (and wait for every worker)."""
    tf = tensorflow()
    comm = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=comm)


def run_mirrored(model_name: str, workers: int, batch: int, steps: int, warmup: int, seed: int,
                 lr: float, tick: Callable[[int], None] = lambda n: None,
                 before: Callable[[], list[float]] | None = None,
                 between: Callable[[], None] = lambda: None) -> StepTimes:
    """On every worker: MultiWorkerMirroredStrategy (RING) from TF_CONFIG; ``batch`` is per worker.
    ``before`` runs once the strategy is made (TF's collectives must be set up before any op runs);
    ``between`` after every PROBE_EVERY-th measured step, on every worker at once (the steps keep them in step)."""
    tf = tensorflow()
    strategy = mirrored_strategy()
    with strategy.scope():
        model, shape, classes, opt = build_in_scope(tf, model_name, lr)
    sigterm_ends_the_process()
    replica = _step_fn(tf, strategy, model, opt, batch)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = synthetic(tf, shape, classes, batch * workers, seed).with_options(options)
    iterator = iter(strategy.experimental_distribute_dataset(ds))

    @tf.function
    def step(it):
        x, y = next(it)
        per_replica = strategy.run(replica, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    out = StepTimes([], [], variable_devices(model, opt), compute_before=before() if before else None)
    for s in range(warmup + steps):
        if s == warmup:
            out.window[0] = time.time_ns()
        t0 = time.perf_counter_ns()
        loss = float(step(iterator).numpy())
        t = time.perf_counter_ns() - t0
        if s >= warmup:
            out.window[1] = time.time_ns()
            out.ns.append(t)
            out.losses.append(loss)
            tick(1)
            if (s - warmup) % PROBE_EVERY == PROBE_EVERY - 1:
                between()
    return out


def start_server(job: str, index: int):
    """A PS or worker task: a TF gRPC server that the chief drives (on the run's address: see _tf_bind)."""
    tf = tensorflow()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=job, task_index=index, protocol="grpc",
                                  start=True)
    sigterm_ends_the_process()
    return server
