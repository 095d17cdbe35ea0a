"""Parameter-server throughput (TF-gRPC-Bench's PS benchmark, with real updates): W workers x P shards,
fully connected. Ranks 0 .. W-1 are workers (rank 0 reports), ranks W .. W+P-1 are shards.

RPC/s and MB/s: all workers' RPCs and bytes over the slowest worker's wall-clock time (every worker
starts at the same barrier, as osu_mbw_mr); steps/s is per worker, averaged; push and pull latencies
are per RPC, over all workers.
"""

from __future__ import annotations

import argparse

import numpy as np

from commbench.benchmarks.base import WRONG, Benchmark, Context
from commbench.core.argtypes import RANKS
from commbench.core.config import RunConfig
from commbench.core.harness import LoopDefaults, Side, Timing, untimed_loop
from commbench.core.payload import Payload
from commbench.core.table import Column
from commbench.core.world import World
from commbench.emulators.placement import POLICIES, place, shard_bytes
from commbench.emulators.ps import Shard, Worker, expected_value

PS_LOOPS = LoopDefaults((100, 10), (10, 2))
MS = "{:.2f}"


class PSThroughput(Benchmark):
    name = "ps-throughput"
    help = "parameter-server emulator: workers push gradients to and pull variables from PS shards"
    loops = PS_LOOPS
    metric, better = "steps_s", "higher"
    loop_source = "commbench's PS"  # 100 steps / 10 warm-up up to 8 KiB, 10 / 2 above
    units = ("steps/s per worker, averaged; RPC/s and MB/s (10^6 B/s): all workers' over the slowest worker's "
             "time; push/pull latency in ms per RPC (p99 from 100 RPCs); Shard MB = bytes each shard holds")
    columns = [Column("workers", "W", 3, "{:d}"), Column("ps", "P", 3, "{:d}"),
               Column("iterations", "Steps", 6, "{:d}"),
               Column("steps_s", "Steps/s", 9, MS), Column("rpc_s", "RPC/s", 9, "{:.1f}"),
               Column("mb_s", "MB/s", 10, MS), Column("push_p50_ms", "Push p50", 9, MS),
               Column("push_p99_ms", "p99", 8, MS), Column("pull_p50_ms", "Pull p50", 9, MS),
               Column("pull_p99_ms", "p99", 8, MS), Column("shard_mb", "Shard MB", -16), WRONG]

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--workers", type=RANKS, default=2, help="worker ranks (default 2)")
        parser.add_argument("--ps", type=RANKS, default=1, help="parameter-server shards (default 1)")
        parser.add_argument("--placement", choices=POLICIES, default="round-robin",
                            help="variables on shards: round-robin (TF default) or greedy by bytes")
        parser.add_argument("--mode", choices=("sync", "async"), default="sync",
                            help="sync: shards average all workers' pushes each step (default); async: every "
                                 "push applied on arrival, no barrier")
        parser.add_argument("--rpc", choices=("packed", "per-tensor"), default="packed",
                            help="packed: one push and one pull per worker, shard and step (TF-gRPC-Bench's, "
                                 "the default); per-tensor: every gradient pushed and every variable pulled "
                                 "as its own RPC, as TensorFlow's PS training sends them")
        parser.set_defaults(payload="skew")

    @classmethod
    def ranks(cls, args: argparse.Namespace) -> int:
        return args.workers + args.ps

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self.nw, self.np_ = config.args.workers, config.args.ps

    def peers(self, world: World) -> list[int]:
        workers, shards = range(self.nw), range(self.nw, self.nw + self.np_)
        return list(shards) if world.rank < self.nw else list(workers)

    def roles(self, world: World) -> list[str]:
        return ["worker"] * self.nw + ["ps"] * self.np_

    def traffic_steps(self, timing: Timing) -> int:
        """Worker-steps, as ``train --traffic`` counts them for the PS strategy."""
        return max(1, timing.n * self.nw)

    def prepare(self, ctx: Context, payload: Payload, checked: bool) -> Side:
        me, nw, np_ = ctx.world.rank, self.nw, self.np_
        owners = place(payload.sizes, np_, self.args.placement)
        per_shard = {nw + s: [size for size, o in zip(payload.sizes, owners, strict=True) if o == s]
                     for s in range(np_)}
        asynchronous, per_tensor = self.args.mode == "async", self.args.rpc == "per-tensor"
        if me < nw:
            worker = Worker(me, nw, per_shard, ctx.links, checked, asynchronous, ctx.corrupt_every, per_tensor)
            return Side(step=worker.step, begin=worker.start, wrong=lambda: worker.wrong,
                        report=lambda: {"push": worker.push_ns, "pull": worker.pull_ns})
        shard = Shard(per_shard[me], list(range(nw)), ctx.links, asynchronous, per_tensor)
        run = shard.run_async if asynchronous else (lambda n: untimed_loop(shard.step, n))
        return Side(run=run, wrong=shard.wrong if checked else (lambda: 0),
                    report=lambda: {"steps": shard.steps,
                                    "value": float(shard.var_f[0][0]) if shard.var_f and len(shard.var_f[0])
                                    else None})

    def row(self, payload: Payload, timing: Timing, reports: list[dict]) -> dict:
        nw, np_ = self.nw, self.np_
        workers, shards = reports[:nw], reports[nw:]
        owners = place(payload.sizes, np_, self.args.placement)
        per_step_rpcs = 2 * (len(payload.sizes) if self.args.rpc == "per-tensor" else np_)
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
                "expected_value": expected_value(shards[0]["steps"], nw, self.args.mode == "async"),
                "ps_mode": self.args.mode, "rpc": self.args.rpc}


def _p99(values: np.ndarray) -> float | None:
    return float(np.percentile(values, 99)) if len(values) >= 100 else None
