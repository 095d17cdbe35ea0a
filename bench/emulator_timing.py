"""The PS emulator's timing against TensorFlow's: at each link rate, on emulated hosts (root), a
round of the emulator (``ps-throughput --rpc tf``: one step of every worker, no compute) beside what
TensorFlow's PS training spends per round beyond compute (its mean round less the compute time of a
``train --compute-only`` run made just before, the same W workers computing at once).

Both over C++ gRPC's unary calls where grpc-cpp is built (TF talks C++ gRPC), else grpcio. The ratio
is the emulator's round over TF's time beyond compute, per rate, from runs made minutes apart on the
same hosts: TF's time beyond compute holds its runtime's own cost (its executor, the coordinator's
scheduling) besides the network's, so a ratio under 1 says how much of it the wire alone explains.

    sudo .venv/bin/python bench/emulator_timing.py                         # 200mbit 1gbit none, small_cnn
    sudo .venv/bin/python bench/emulator_timing.py --rates 500mbit --model mobilenet_v2 --batch 32 --steps 8
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from common import BIN, commbench_rows


def hosts(rate: str) -> None:
    p = subprocess.run([str(BIN / "commbench"), "hosts", "up", "5", "--rate", rate], capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"commbench hosts up 5 --rate {rate} failed: {p.stderr.strip()}")


def transport() -> list[str]:
    probe = subprocess.run([str(BIN / "commbench"), "p2p-latency", "-t", "grpc-cpp", "--grpc-call", "unary", "-m",
                            "8", "-i", "5", "-x", "1"], capture_output=True, text=True)
    return ["-t", "grpc-cpp" if probe.returncode == 0 else "grpc", "--grpc-call", "unary"]


def one_rate(rate: str, a: argparse.Namespace, t: list[str]) -> dict:
    hosts(rate)
    shape = ["--model", a.model, "--workers", str(a.workers), "--batch", str(a.batch), "--hosts", "5"]
    (compute,) = commbench_rows(["train", "--compute-only", *shape])
    trains = [commbench_rows(["train", *shape, "--strategy", "ps", "--ps", "1", "--steps", str(a.steps),
                              "--warmup-steps", str(max(2, a.steps // 4))])[-1] for _ in range(a.repeats)]
    emu = commbench_rows(["ps-throughput", "--rpc", "tf", *t, "--payload", a.model, "--workers", str(a.workers),
                          "--ps", "1", "--hosts", "5", "-i", str(a.iterations), "-x", "2"])[-1]
    rounds = [a.workers * a.batch / r["images_s"] * 1e3 for r in trains]  # mean round, as images/s counts
    beyond = [x - compute["compute_ms"] for x in rounds]
    emu_round = 1e3 / emu["steps_s"]
    return {"rate": rate, "tf_round_ms": rounds, "compute_ms": compute["compute_ms"], "tf_beyond_ms": beyond,
            "emulator_round_ms": emu_round, "ratio": [emu_round / b if b > 0 else None for b in beyond]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="200mbit,1gbit,none")
    p.add_argument("--model", default="small_cnn")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=40, help="train's measured steps")
    p.add_argument("--iterations", type=int, default=30, help="the emulator's rounds")
    p.add_argument("--repeats", type=int, default=2, help="train runs per rate")
    a = p.parse_args()
    t = transport()
    print(f"# {a.model}, W={a.workers}, P=1, batch {a.batch}; emulator over {' '.join(t)}; emulated hosts")
    print(f"# {'rate':<8} {'TF round ms':>16} {'compute ms':>11} {'TF beyond ms':>16} {'emulator ms':>12} "
          f"{'emulator / TF beyond':>22}")
    rows = []
    try:
        for rate in a.rates.split(","):
            r = one_rate(rate, a, t)
            rows.append(r)
            def fmt(xs, f="{:.1f}"):
                return "/".join(f.format(x) if x is not None else "-" for x in xs)
            print(f"  {rate:<8} {fmt(r['tf_round_ms']):>16} {r['compute_ms']:>11.1f} {fmt(r['tf_beyond_ms']):>16} "
                  f"{r['emulator_round_ms']:>12.1f} {fmt(r['ratio'], '{:.2f}'):>22}", flush=True)
    finally:
        subprocess.run([str(BIN / "commbench"), "hosts", "down"], capture_output=True)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
