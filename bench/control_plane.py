"""What `cluster`'s control plane costs rank 0 at 1,000 to 100,000 endpoints, without that many ranks.

Rank 0's real code runs here: the rendezvous (core/run/rendezvous.StoreServer, its one selector
thread) and the dispatcher (core/run/tasks.Dispatcher) handing out a round-robin tournament's rounds
(benchmarks/_cluster/schedule.tournament) as pair tasks. The endpoints are simulated: worker processes, each
running many asyncio connections that speak the real protocol (the token's challenge and proof,
then one GET carrying its SET per task, core/run/tasks.Worker's frames) and whose pairs "measure" in
a fixed ``--pair-ms``. Per round: wall time, rank 0's CPU (its process: the loop and the
dispatcher), its memory, and the requests the rendezvous answered.

    sudo python bench/control_plane.py --endpoints 1000,10000,100000 --rounds 5 [--workers 8]

Root (or a high enough hard limit) for the descriptors: rank 0 holds one per endpoint, and each
worker its share; connections come from several loopback addresses (127.0.0.2, ...) so that
100,000 of them do not run out of ephemeral ports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import queue
import resource
import socket
import time
from types import SimpleNamespace

from commbench.benchmarks._cluster.schedule import tournament
from commbench.core.run import auth
from commbench.core.run.framing import HEADER, decode_header, encode
from commbench.core.run.rendezvous import GET, OK, VALUE, StoreServer
from commbench.core.run.tasks import Dispatcher

TOKEN = "control-plane-bench"
HANDSHAKES = 32  # a worker's connections proving the token at once (the rendezvous holds 128 in all)
PER_ADDRESS = 10_000  # connections from one loopback source address (ephemeral ports: ~28,000, some in TIME_WAIT)


def raise_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, need + 200)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    except (ValueError, OSError):
        raise SystemExit(f"need {want} file descriptors, the hard limit is {hard}: run as root or raise it") from None


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, dict, bytes]:
    kind, jlen, blen = decode_header(await reader.readexactly(HEADER.size))
    obj = json.loads(await reader.readexactly(jlen)) if jlen else {}
    return kind, obj, (await reader.readexactly(blen) if blen else b"")


async def join(rank: int, size: int, port: int, source: str, gate: asyncio.Semaphore):
    """A proven connection to the rendezvous, as StoreClient makes one: again while it is busy."""
    while True:
        async with gate:  # the rendezvous holds 128 connections without the token at once; more wait
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0),
                                                           limit=1 << 20)
            try:
                kind, obj, _ = await read_frame(reader)
                if obj.get("kind") != "busy":
                    challenge, mine = obj["nonce"], auth.nonce()
                    hello = {"rank": rank, "size": size, "host": f"sim{rank}", "role": "rank", "nonce": mine}
                    hello["proof"] = auth.proof(TOKEN, "client", challenge, mine, hello)
                    writer.write(encode(1, hello))
                    await read_frame(reader)  # PROVEN
                    kind, _, _ = await read_frame(reader)
                    if kind == OK:
                        return reader, writer
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            writer.close()
        await asyncio.sleep(0.05)


async def endpoint(rank: int, size: int, port: int, source: str, pair_s: float, ready: asyncio.Event,
                   gate: asyncio.Semaphore) -> None:
    """One simulated endpoint: joins the rendezvous, proves the token, then does tasks until the end."""
    reader, writer = await join(rank, size, port, source, gate)
    ready.set()
    seq, result = 0, b"{}"
    while True:
        seq += 1
        writer.write(encode(GET, {"key": f"task/{rank}/{seq}", "timeout": 3600, "set": f"result/{rank}/{seq - 1}",
                                  "take": True}, result))
        kind, _, blob = await read_frame(reader)
        if kind != VALUE:
            return
        task = json.loads(blob)
        if task.get("kind") == "end":
            writer.close()
            return
        if pair_s:
            await asyncio.sleep(pair_s)
        result = b'{"mb_s": 1000.0, "lat_us": 5.0, "wrong": 0}'


def worker(ranks: list[int], size: int, port: int, pair_s: float, joined) -> None:
    raise_fd_limit(len(ranks))

    async def main() -> None:
        events, tasks, gate = [], [], asyncio.Semaphore(HANDSHAKES)
        for r in ranks:
            ev = asyncio.Event()
            events.append(ev)
            tasks.append(asyncio.create_task(endpoint(r, size, port, f"127.0.0.{2 + r // PER_ADDRESS}", pair_s, ev,
                                                      gate)))
        while not all(e.is_set() for e in events):
            await asyncio.sleep(0.05)
            if any(t.done() and t.exception() for t in tasks):
                raise next(t.exception() for t in tasks if t.done() and t.exception())
        joined.put(len(ranks))
        await asyncio.gather(*tasks)
    asyncio.run(main())


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def one(n: int, rounds: int, workers: int, pair_s: float) -> dict:
    size = n + 1  # rank 0 conducts, ranks 1..n are the endpoints
    raise_fd_limit(size + 100)
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    server = StoreServer(listener, TOKEN, size, tolerant=True)
    world = SimpleNamespace(rank=0, size=size, timeout=3600.0, server=server, describe=lambda r: f"rank {r}")
    boss = Dispatcher(world)
    base_rss = rss_mb()
    t0 = time.monotonic()
    joined = mp.Queue()
    share = [list(range(1 + w, size, workers)) for w in range(workers)]
    procs = [mp.Process(target=worker, args=(share[w], size, server.port, pair_s, joined), daemon=True)
             for w in range(workers)]
    for p in procs:
        p.start()
    got = 0
    while got < n:
        try:
            got += joined.get(timeout=1)
        except queue.Empty:
            if not all(p.is_alive() for p in procs):
                raise SystemExit(f"a worker died before its endpoints joined (exit codes "
                                 f"{[p.exitcode for p in procs]}); see its traceback above") from None
    first = boss.collect(range(1, size))  # each endpoint's first report
    assert len(first) == n
    join_s = time.monotonic() - t0
    schedule = tournament(n)[:rounds]
    per_round = []
    for pairs in schedule:
        c0, w0, q0 = cpu(), time.monotonic(), server.requests
        tasks = {}
        for a, b in pairs:
            tag = f"pairwise.{a}.{b}"
            tasks[a + 1] = {"kind": "pair", "tag": tag, "members": [a + 1, b + 1], "addr": ["127.0.0.1", 1]}
            tasks[b + 1] = {"kind": "pair", "tag": tag, "members": [a + 1, b + 1]}
        boss.assign(tasks)
        results = boss.collect(list(tasks))
        assert len(results) == len(tasks) and not any(r.get("lost") for r in results.values())
        per_round.append({"wall_s": time.monotonic() - w0, "cpu_s": cpu() - c0, "requests": server.requests - q0,
                          "pairs": len(pairs)})
    boss.end(range(1, size))
    for p in procs:
        p.join(60)
    server.close()
    walls = sorted(r["wall_s"] for r in per_round)
    cpus = sorted(r["cpu_s"] for r in per_round)
    return {"endpoints": n, "rounds": len(per_round), "join_s": join_s, "round_wall_s": walls[len(walls) // 2],
            "round_cpu_s": cpus[len(cpus) // 2], "requests_per_round": per_round[-1]["requests"],
            "pairs_per_round": per_round[-1]["pairs"], "rank0_rss_mb": rss_mb(),
            "rank0_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3, "rank0_rss_growth_mb":
            rss_mb() - base_rss, "pair_s": pair_s, "tournament_rounds": n - 1 + n % 2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoints", default="1000,10000")
    ap.add_argument("--rounds", type=int, default=5, help="tournament rounds measured at each size")
    ap.add_argument("--workers", type=int, default=max(2, os.cpu_count() or 2))
    ap.add_argument("--pair-ms", type=float, default=0.0, help="what a simulated pair's measurement takes")
    ap.add_argument("--out", help="append each size's row to this JSONL file")
    a = ap.parse_args()
    print(f"# control plane: {a.rounds} rounds a size, {a.workers} worker processes, pairs of {a.pair_ms:g} ms "
          f"({os.cpu_count()} CPUs)")
    print(f"# {'endpoints':>9} {'join s':>8} {'round s':>8} {'cpu s':>7} {'req/rnd':>8} {'rss MB':>7} {'peak MB':>7} "
          f"{'tournament (control plane)':>27}")
    for n in (int(x) for x in a.endpoints.split(",")):
        r = one(n, a.rounds, a.workers, a.pair_ms / 1000)
        total = r["round_wall_s"] * r["tournament_rounds"]
        print(f"  {n:>9} {r['join_s']:>8.1f} {r['round_wall_s']:>8.3f} {r['round_cpu_s']:>7.3f} "
              f"{r['requests_per_round']:>8} {r['rank0_rss_mb']:>7.0f} {r['rank0_peak_mb']:>7.0f} "
              f"{total / 3600:>22.2f} h", flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
