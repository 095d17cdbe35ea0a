"""Parameter-server throughput (TF-gRPC-Bench's PS benchmark, with real updates): W workers x P shards.
By default (``--rpc tf``: what TensorFlow's PS training sends, ``emulators.tf_ps``) rank 0 is the
chief that drives the workers, then W workers, then P shards: W + P + 1 ranks. With ``--rpc packed``
(TF-gRPC-Bench's) or ``per-tensor``, ranks 0 .. W-1 are workers (rank 0 reports) and W .. W+P-1
shards, fully connected, and ``--mode`` picks sync or async updates.

RPC/s and MB/s: all workers' RPCs and bytes over the slowest worker's wall-clock time (every worker
starts at the same barrier, as osu_mbw_mr); steps/s is per worker, averaged; push and pull latencies
are per RPC, over all workers (``--rpc tf``: per batch of calls made at once, as TF makes them: a
worker's variable reads of a step, a shard's gradient reads from one worker).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commbench.benchmarks.base import WRONG, Benchmark, Context
from commbench.core.config.argtypes import RANKS
from commbench.core.config.options import Options, opt
from commbench.core.config.run import CommonOptions, RunConfig
from commbench.core.errors import UsageError
from commbench.core.measure.harness import LoopDefaults, Side, Timing, untimed_loop
from commbench.core.measure.payload import SCHEMES, Payload
from commbench.core.output.table import Column, key
from commbench.core.run.world import World
from commbench.emulators import tf_ps
from commbench.emulators.placement import POLICIES, place, shard_bytes
from commbench.emulators.ps import Shard, Worker, expected_value
from commbench.profiles.store import load

PS_LOOPS = LoopDefaults((100, 10), (10, 2))
MS = "{:.2f}"


@dataclass(frozen=True)
class PSOptions(Options):
    workers: int = opt(2, type=RANKS, help="worker ranks (default 2)")
    ps: int = opt(1, type=RANKS, help="parameter-server shards (default 1)")
    placement: str = opt("round-robin", choices=POLICIES,
                         help="variables on shards: round-robin (TF's default, in creation order) or greedy by bytes "
                              "(a what-if: TF's GreedyLoadBalancingStrategy, which its PS training does not use "
                              "unless asked)")
    rpc: str = opt("tf", choices=("tf", "packed", "per-tensor"),
                   help="tf (default): what TensorFlow's PS training sends, measured on the wire (a chief rank "
                        "driving each step: W + P + 1 ranks; the shards calling the workers for gradients; control "
                        "calls and scalar reads; gradients applied on arrival); packed: one push and one pull per "
                        "worker, shard and step (TF-gRPC-Bench's); per-tensor: every gradient pushed and every "
                        "variable pulled as its own call")
    mode: str | None = opt(None, choices=("sync", "async"),
                           help="with --rpc packed or per-tensor: sync, shards average all workers' pushes each step "
                                "(their default); async, every push applied on arrival, no barrier")


class PSThroughput(Benchmark[PSOptions]):
    name = "ps-throughput"
    help = "parameter-server emulator: workers push gradients to and pull variables from PS shards"
    loops = PS_LOOPS
    metric, better = "steps_s", "higher"
    loop_source = "commbench's PS"  # 100 steps / 10 warm-up up to 8 KiB, 10 / 2 above
    units = ("steps/s per worker, averaged; RPC/s and MB/s (10^6 B/s): all workers' over the slowest worker's "
             "time; push/pull latency in ms per RPC (--rpc tf: per batch of calls made at once; p99 from 100); "
             "Shard MB = bytes each shard holds")
    columns = [Column("workers", "W", 3, "{:d}", "count", "worker ranks"),
               Column("ps", "P", 3, "{:d}", "count", "parameter-server shards"),
               Column("iterations", "Steps", 6, "{:d}", "count", "timed steps per worker"),
               Column("steps_s", "Steps/s", 9, MS, "1/s", "steps per second per worker, averaged"),
               Column("rpc_s", "RPC/s", 9, "{:.1f}", "1/s", "all workers' RPCs over the slowest worker's time"),
               Column("mb_s", "MB/s", 10, MS, "MB/s", "all workers' pushed and pulled bytes over the slowest "
                      "worker's time"),
               Column("push_p50_ms", "Push p50", 9, MS, "ms", "median gradient push RPC (--rpc tf: a shard's "
                      "reads of one worker's gradients, all at once)"),
               Column("push_p99_ms", "p99", 8, MS, "ms", "99th percentile push (empty under 100 RPCs)"),
               Column("pull_p50_ms", "Pull p50", 9, MS, "ms", "median variable pull RPC (--rpc tf: a worker's "
                      "reads of a step's variables, all at once)"),
               Column("pull_p99_ms", "p99", 8, MS, "ms", "99th percentile pull (empty under 100 RPCs)"),
               Column("shard_mb", "Shard MB", -16, doc="MB each shard holds, '/'-separated (text)"), WRONG]
    keys = [key("shard_steps", "count", "steps each shard applied (a list)", many=True),
            key("final_value", doc="shard 0's first variable element after the run (validation)"),
            key("expected_value", doc="what final_value must be after shard 0's steps"),
            key("ps_mode", doc="sync, async or tf: how shards apply pushes"),
            key("rpc", doc="--rpc: tf, packed or per-tensor")]

    Options = PSOptions
    opts: PSOptions  # its instance (self.opts)
    x_axis, series_keys = "workers", ("transport", "mode", "poll", "payload", "ps", "placement", "rpc")
    common_defaults = {"payload": "skew"}

    @classmethod
    def ranks(cls, opts: PSOptions, common: CommonOptions) -> int:
        if opts.rpc == "tf" and opts.mode:
            raise UsageError(f"--mode {opts.mode} applies to --rpc packed or per-tensor; --rpc tf (the default) "
                             "applies each gradient on arrival, as TensorFlow's PS training does: drop --mode "
                             "or add --rpc packed")
        return opts.workers + opts.ps + (opts.rpc == "tf")

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self.nw, self.np_ = self.opts.workers, self.opts.ps
        self.tf = self.opts.rpc == "tf"
        self.mode = self.opts.mode or "sync"
        first = 1 if self.tf else 0  # tf: rank 0 is the chief
        self.workers = list(range(first, first + self.nw))
        self.shards = list(range(first + self.nw, first + self.nw + self.np_))

    def peers(self, world: World) -> list[int]:
        me = world.rank
        if me in self.workers:
            return ([0] if self.tf else []) + self.shards
        if me in self.shards:
            return self.workers + ([s for s in self.shards if s != me] if self.tf else [])
        return self.workers  # the chief

    def roles(self, world: World) -> list[str]:
        return ["chief"] * self.tf + ["worker"] * self.nw + ["ps"] * self.np_

    def traffic_steps(self, timing: Timing) -> int:
        """Worker-steps, as ``train --traffic`` counts them for the PS strategy."""
        return max(1, timing.n * self.nw)

    def prepare(self, ctx: Context, payload: Payload, checked: bool) -> Side:
        if self.tf:
            return self.prepare_tf(ctx, payload, checked)
        me, nw, np_ = ctx.world.rank, self.nw, self.np_
        owners = place(payload.sizes, np_, self.opts.placement)
        per_shard = {nw + s: [size for size, o in zip(payload.sizes, owners, strict=True) if o == s]
                     for s in range(np_)}
        asynchronous, per_tensor = self.mode == "async", self.opts.rpc == "per-tensor"
        if me < nw:
            worker = Worker(me, nw, per_shard, ctx.links, checked, asynchronous, ctx.corrupt_every, per_tensor)
            return Side(step=worker.step, begin=worker.start, wrong=lambda: worker.wrong,
                        report=lambda: {"push": worker.push_ns.tolist(), "pull": worker.pull_ns.tolist()})
        shard = Shard(per_shard[me], list(range(nw)), ctx.links, asynchronous, per_tensor)
        run = shard.run_async if asynchronous else (lambda n: untimed_loop(shard.step, n))
        return Side(run=run, wrong=shard.wrong if checked else (lambda: 0),
                    report=lambda: {"steps": shard.steps,
                                    "value": float(shard.var_f[0][0]) if shard.var_f and len(shard.var_f[0])
                                    else None})

    def prepare_tf(self, ctx: Context, payload: Payload, checked: bool) -> Side:
        me, variables = ctx.world.rank, tf_variables(self.common.payload, payload)
        owners = place([v.nbytes for v in variables], self.np_, self.opts.placement) \
            if self.opts.placement != "round-robin" else None
        plans = dict(zip(self.shards, tf_ps.plan(variables, self.np_, owners), strict=True))
        self.tf_totals = (tf_ps.rpcs_per_worker_step(list(plans.values())), sum(v.nbytes for v in variables))
        if me == 0:
            return Side(step=tf_ps.Chief(self.workers, ctx.links, len(variables)).round)
        if me in self.workers:
            worker = tf_ps.Worker(me - 1, 0, plans, ctx.links, len(variables), ctx.transport)
            return Side(run=worker.run, begin=worker.start, report=lambda: {"pull": worker.pull_ns.tolist()})
        shard = tf_ps.Shard(me, plans, self.workers, ctx.links, ctx.transport)
        return Side(run=shard.run, wrong=shard.wrong if checked else (lambda: 0),
                    report=lambda: {"push": [x for rec in shard.push_ns for x in rec.tolist()], "steps": shard.steps,
                                    "held": sum(v.nbytes for v in shard.plan.variables), "value": shard.value()})

    def row_tf(self, payload: Payload, timing: Timing, reports: list[dict]) -> dict:
        nw, n = self.nw, timing.n
        chief, workers, shards = reports[0], reports[1:1 + nw], reports[1 + nw:]
        wall = chief["wall_ns"] / 1e9  # n rounds: one step of every worker each
        rpcs, nbytes = self.tf_totals  # rank 0, the chief, prepared this point too
        push = np.asarray([x for s in shards for x in s["push"]], dtype=np.float64) / 1e6
        pull = np.asarray([x for w in workers for x in w["pull"]], dtype=np.float64) / 1e6
        return {"workers": nw, "ps": self.np_, "iterations": n, "steps_s": n / wall,
                "rpc_s": rpcs * n * nw / wall, "mb_s": 2 * nbytes * n * nw / wall / 1e6,
                "push_p50_ms": float(np.percentile(push, 50)), "push_p99_ms": _p99(push),
                "pull_p50_ms": float(np.percentile(pull, 50)), "pull_p99_ms": _p99(pull),
                "shard_mb": "/".join(f"{s['held'] / 1e6:.1f}" for s in shards),
                "shard_steps": [s["steps"] for s in shards], "final_value": shards[0]["value"],
                "expected_value": expected_value(shards[0]["steps"], nw, True), "ps_mode": "tf", "rpc": "tf"}

    def row(self, payload: Payload, timing: Timing, reports: list[dict]) -> dict:
        if self.tf:
            return self.row_tf(payload, timing, reports)
        nw, np_ = self.nw, self.np_
        workers, shards = reports[:nw], reports[nw:]
        owners = place(payload.sizes, np_, self.opts.placement)
        per_step_rpcs = 2 * (len(payload.sizes) if self.opts.rpc == "per-tensor" else np_)
        per_step_bytes = 2 * payload.nbytes
        slowest = max(w["wall_ns"] for w in workers) / 1e9  # every worker starts at the same barrier
        push = np.asarray([x for w in workers for x in w["push"]], dtype=np.float64) / 1e6
        pull = np.asarray([x for w in workers for x in w["pull"]], dtype=np.float64) / 1e6
        n = timing.n
        return {"workers": nw, "ps": np_, "iterations": n,
                "steps_s": float(np.mean([w["n"] / (w["wall_ns"] / 1e9) for w in workers])),
                "rpc_s": per_step_rpcs * n * nw / slowest,
                "mb_s": per_step_bytes * n * nw / slowest / 1e6,
                "push_p50_ms": float(np.percentile(push, 50)), "push_p99_ms": _p99(push),
                "pull_p50_ms": float(np.percentile(pull, 50)), "pull_p99_ms": _p99(pull),
                "shard_mb": "/".join(f"{b / 1e6:.1f}" for b in shard_bytes(payload.sizes, owners, np_)),
                "shard_steps": [s["steps"] for s in shards], "final_value": shards[0]["value"],
                "expected_value": expected_value(shards[0]["steps"], nw, self.mode == "async"),
                "ps_mode": self.mode, "rpc": self.opts.rpc}


def _p99(values: np.ndarray) -> float | None:
    return float(np.percentile(values, 99)) if len(values) >= 100 else None


def tf_variables(spec: str | None, payload: Payload) -> list[tf_ps.Variable]:
    """The model's variables in creation order, trainable or not, where --payload names a profile that
    lists them; else the payload's buffers, all trainable."""
    if spec and spec.partition(":")[0] not in SCHEMES:
        return tf_ps.variables_of(load(spec))
    return [tf_ps.Variable(n) for n in payload.sizes]
