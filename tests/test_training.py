"""commbench train (real distributed TensorFlow) and commbench predict (its arithmetic by hand)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ENV, commbench, table_rows

from commbench.core.errors import UsageError
from commbench.core.imports import TF_NOISE
from commbench.core.results import read_runs
from commbench.training import predict as pr


# -- predict: hand-computed cases -------------------------------------------------------------------
def test_fit_alpha_beta():
    link = pr.fit([(8, 10.0), (65536, 10 + 65536 / 1000), (1 << 20, 10 + (1 << 20) / 1000), (1024, 11.0)])
    assert link.alpha_us == 10.0 and link.beta_mb_s == pytest.approx(1000.0)
    assert link.us(1e6) == pytest.approx(1010.0)
    with pytest.raises(UsageError, match="at least two sizes"):
        pr.fit([(8, 1.0)])
    with pytest.raises(UsageError, match="does not grow"):
        pr.fit([(8, 5.0), (1 << 20, 4.0)])


def test_predict_ps_by_hand():
    link = pr.LinkModel(100.0, 1000.0)
    sizes = [1_000_000, 2_000_000, 3_000_000]  # round-robin on 2 shards: [4 MB, 2 MB]
    p = pr.predict_ps(sizes, workers=2, ps=2, batch=32, compute_ms=50.0, link=link)
    # busiest link: max(2 workers x 4 MB shard, 6 MB model) = 8 MB -> 100 us + 8000 us each way
    assert p.terms == {"pull_ms": pytest.approx(8.1), "push_ms": pytest.approx(8.1)}
    assert p.step_ms == pytest.approx(66.2) and p.images_s == pytest.approx(64 / 66.2e-3)
    assert p.one_worker_images_s == pytest.approx(640.0)
    assert p.min_beta_mb_s == pytest.approx(2 * 8e6 / (50_000 - 200))  # (W-1) compute - 2 alpha of room
    shared = pr.predict_ps(sizes, 2, 2, 32, 50.0, link, shared_host=True)  # 2 x 6 MB through one path
    assert shared.step_ms == pytest.approx(50 + 2 * 12.1)
    greedy = pr.predict_ps(sizes, 2, 2, 32, 50.0, link, policy="greedy")  # shards [4 MB, 2 MB] again
    assert greedy.step_ms == pytest.approx(66.2)
    assert pr.predict_ps(sizes, 1, 1, 32, 50.0, link).min_beta_mb_s is None


def test_overhead_adds_a_fixed_step_cost_and_raises_the_minimum_bandwidth():
    link = pr.LinkModel(100.0, 1000.0)
    p = pr.predict_ps([1_000_000, 2_000_000, 3_000_000], 2, 2, 32, 50.0, link)
    q = pr.with_overhead(p, 10.0)
    assert q.step_ms == pytest.approx(76.2) and q.images_s == pytest.approx(64 / 76.2e-3)
    assert q.terms["tf_overhead_ms"] == 10.0 and q.comm_ms == pytest.approx(26.2)
    assert q.min_beta_mb_s == pytest.approx(16e6 / (50_000 - 200 - 10_000))
    assert pr.with_overhead(p, 60.0).min_beta_mb_s is None  # the overhead alone eats what W workers save


def test_measured_communication_replaces_the_model(tmp_path):
    link = pr.LinkModel(100.0, 1000.0)
    p = pr.with_comm(pr.predict_ps([1_000_000, 2_000_000], 2, 1, 32, 50.0, link), 30.0, "ps-throughput")
    assert p.step_ms == 80.0 and p.comm_ms == 30.0 and p.images_s == pytest.approx(64 / 80e-3)
    meta = {"type": "meta", "bench": "allreduce", "options": {"ranks": 4}}
    rows = [{"type": "row", "bench": "allreduce", "transport": "tcp", "algorithm": "ring", "size": s,
             "time_us": t} for s, t in ((1 << 20, 1000.0), (4 << 20, 3000.0))]
    f = tmp_path / "ar.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in [meta, *rows]) + "\n")
    ms, source = pr.measured_comm(str(f), "mirrored", 4, 0, "small_cnn", 3 << 20)
    assert ms == pytest.approx(3.0 * 3 / 4) and "at 4194304 B" in source  # nearest size, scaled to the bytes
    with pytest.raises(UsageError, match="allreduce rows over 2 ranks"):
        pr.measured_comm(str(f), "mirrored", 2, 0, "small_cnn", 1 << 20)
    with pytest.raises(UsageError, match="ps-throughput rows with --workers 2 --ps 1"):
        pr.measured_comm(str(f), "ps", 2, 1, "small_cnn", 1 << 20)


def test_predict_ring_by_hand():
    link = pr.LinkModel(100.0, 1000.0)
    p = pr.predict_ring(6_000_000, workers=4, batch=32, compute_ms=50.0, link=link)
    # 2 (W-1) alpha = 600 us; 2 (W-1)/W x 6 MB = 9 MB at 1000 B/us = 9000 us
    assert p.comm_ms == pytest.approx(9.6) and p.step_ms == pytest.approx(59.6)
    assert p.images_s == pytest.approx(128 / 59.6e-3)
    assert p.min_beta_mb_s == pytest.approx(9e6 / (150_000 - 600))
    assert pr.predict_ring(6_000_000, 2, 32, 50.0, link, shared_host=True).comm_ms == pytest.approx(
        (2 * 100 + 2 * 6e6 / 1000) / 1e3)


def test_dominant_names_the_busiest_shard_and_tensors():
    lines = pr.dominant([1_000_000, 2_000_000, 3_000_000], ["a", "b", "c"], 2, "round-robin")
    assert lines[0].startswith("busiest shard: 0 of 2 holds 4.00 MB (67 %")
    assert lines[1] == "largest tensors: c 3.00 MB (50 %), b 2.00 MB (33 %), a 1.00 MB (17 %)"


# -- bad input ------------------------------------------------------------------------------------
def test_train_bad_input():
    r = commbench("train", "--model", "alexnet")
    assert r.code == 2 and "unknown model 'alexnet'" in r.err and "small_cnn, resnet50" in r.err
    r = commbench("train", "--workers", "0")
    assert r.code == 2 and "argument --workers: must be a whole number from 1" in r.err
    code = ("import sys; sys.modules['tensorflow'] = None; from commbench.cli import main; "
            "sys.exit(main(['train', '--steps', '2']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=60)
    assert p.returncode == 2 and "pip install 'commbench[tf]'" in p.stderr and "Traceback" not in p.stderr


def test_predict_wrong_kind_of_file(tmp_path):
    out = tmp_path / "bw.jsonl"
    assert commbench("p2p-bandwidth", "-m", "1K,64K", "-i", "5", "-o", str(out)).code == 0
    r = commbench("predict", "--p2p", str(out), "--model", "small_cnn", "--strategy", "ps", "--workers", "2",
                  "--ps", "1", "--batch", "64", "--compute-ms", "50")
    assert r.code == 2 and "needs p2p-latency results" in r.err and "p2p-bandwidth" in r.err
    r = commbench("predict", "--p2p", str(out), "--train", str(out))
    assert r.code == 2 and r.err.count("\n") == 1


# -- real training ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_train_ps_small_then_predict(tmp_path):
    out = tmp_path / "train.jsonl"
    r = commbench("train", "--model", "small-cnn", "--strategy", "ps", "--workers", "2", "--ps", "1",
                  "--steps", "16", "--warmup-steps", "4", "--batch", "32", "--lr", "0.05", "-o", str(out),
                  timeout=400)
    assert r.code == 0, r.err
    (row,) = read_runs(out)[0].rows
    assert row["images_s"] > 0 and row["compute_ms"] > 0 and row["steps"] == 16
    assert row["loss_last"] < row["loss_first"]  # it learns the (fixed, synthetic) batch
    assert len(table_rows(r.out)) == 1
    assert not any(n in r.err for n in TF_NOISE), r.err  # TensorFlow's start-up notices are not the user's
    p2p = tmp_path / "lat.jsonl"
    assert commbench("p2p-latency", "-t", "grpc", "-m", "8,64K,1M", "-i", "50", "-o", str(p2p)).code == 0
    r = commbench("predict", "--p2p", str(p2p), "--train", str(out), "--json")
    assert r.code == 0, r.err
    pred = json.loads(r.out)
    assert pred["measured_images_s"] == pytest.approx(row["images_s"]) and pred["shared_host"] is True
    assert pred["images_s"] > 0 and pred["error_pct"] is not None


# -- TensorFlow's own gRPC as a transport -----------------------------------------------------------------
@pytest.mark.slow
def test_tf_grpc_latency_and_bandwidth_at_two_sizes():
    r = commbench("p2p-latency", "-t", "tf-grpc", "-m", "8,1M", "-i", "50", timeout=300)
    assert r.code == 0, r.err
    assert "latency: <= 50 round trips per tf.function, timed together" in r.out
    rows = table_rows(r.out)
    assert [row[0] for row in rows] == ["8", "1048576"] and all(row[-1] == "0" for row in rows)
    assert float(rows[1][2]) > float(rows[0][2]) > 0  # 1 MiB takes longer than 8 B: bytes really move
    r = commbench("p2p-bandwidth", "-t", "tf-grpc", "-m", "8,1M", "-i", "5", timeout=300)
    assert r.code == 0, r.err
    assert [float(row[4]) > 0 for row in table_rows(r.out)] == [True, True]


@pytest.mark.slow
def test_tf_grpc_passive_rank_waits_while_the_driver_measures():
    """Rank 1 (a bare TF server) has nothing to do in a point; it waits at the next barrier as long as
    rank 0 lives, not --timeout: a point several times longer than the timeout completes."""
    import time

    t0 = time.monotonic()
    r = commbench("p2p-latency", "-t", "tf-grpc", "-m", "64K,128K", "-i", "4001", "--timeout", "1", timeout=300)
    assert r.code == 0, r.err
    rows = table_rows(r.out)
    # a step makes several round trips in one tf.function (16 at 64 KiB, 8 at 128 KiB): whole steps
    assert [row[0] for row in rows] == ["65536", "131072"] and [row[1] for row in rows] == ["4016", "4008"]
    assert not any(n in r.err for n in TF_NOISE), r.err  # no TensorFlow start-up notices
    point_s = 4016 * 2 * float(rows[0][2]) / 1e6  # the timed loop of the first point alone
    assert point_s > 1 and time.monotonic() - t0 > 2 * 1, (point_s, r.out)


def test_tf_grpc_refuses_what_it_cannot_run():
    for args, needle in ((["allreduce"], "needs what the tf-grpc transport cannot do: exchange (sending and "
                                       "receiving at once, as bibw and collectives); many-ranks"),
                         (["p2p-bibw"], "cannot do: exchange"), (["ps-throughput"], "cannot do: many-ranks"),
                         (["p2p-bandwidth", "--validate"], "tf-grpc cannot validate"),
                         (["p2p-latency", "--validate"], "tf-grpc cannot validate")):
        r = commbench(*args, "-t", "tf-grpc")
        assert r.code == 2 and needle in r.err and r.err.count("\n") == 1, r.err


def _listening(launcher) -> set[str]:
    """Addresses the launcher's ranks listen on, right now."""
    import psutil

    found = set()
    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            for c in child.net_connections("tcp"):
                if c.status == psutil.CONN_LISTEN:
                    found.add(c.laddr.ip)
        except psutil.Error:
            pass
    return found


@pytest.mark.slow
@pytest.mark.parametrize("args", [["p2p-latency", "-t", "tf-grpc", "-m", "8:8", "-i", "20000"],
                                  ["train", "--model", "small-cnn", "--strategy", "ps", "--steps", "40"]])
def test_tf_servers_listen_on_the_run_address_only(args):
    """TensorFlow's servers bind every interface on their own; commbench's bind() shim keeps them on
    the run's address (loopback here): every listening socket of every rank, sampled through the run."""
    import time

    from conftest import spawn

    launcher = spawn(*args)
    seen: set[str] = set()
    while launcher.poll() is None:
        seen |= _listening(launcher)
        time.sleep(0.2)
    out, err = launcher.communicate()
    assert launcher.returncode == 0, err
    assert "::ffff:127.0.0.1" in seen or len(seen) > 1, seen  # TF's listeners were seen
    assert seen <= {"127.0.0.1", "::ffff:127.0.0.1"}, seen


@pytest.mark.slow
def test_ps_training_keeps_every_variable_on_the_ps(tmp_path):
    """Under ParameterServerStrategy every model and optimizer variable (momentum slots, the step
    counter) lives on a PS task: none on the chief, which would make them cross chief <-> PS each step."""
    out = tmp_path / "train.jsonl"
    r = commbench("train", "--model", "small-cnn", "--strategy", "ps", "--workers", "2", "--ps", "2",
                  "--steps", "4", "--warmup-steps", "2", "--batch", "8", "-o", str(out), timeout=400)
    assert r.code == 0, r.err
    devices = read_runs(out)[0].meta["variable_devices"]
    slots = [n for n in devices if "momentum" in n]
    assert slots and len(devices) > 2 * len(slots) - 1, devices  # the optimizer's slots were made and listed
    assert all("/job:ps/" in d for d in devices.values()), devices
    assert {d.split("/task:")[1][0] for d in devices.values()} == {"0", "1"}  # spread over both PS


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="a packet capture needs root")
def test_train_traffic_shows_what_tensorflow_sends_per_step(tmp_path):
    """TF's PS training on the wire: each gradient and each variable crosses worker <-> PS as its own
    RecvTensor RPC (the PS calls the worker for gradients, the worker the PS for variables), the bytes
    are the model's plus framing, and the chief drives each worker's step with a few small RPCs."""
    from commbench.profiles.store import load

    out = tmp_path / "train.jsonl"
    r = commbench("train", "--model", "small-cnn", "--strategy", "ps", "--workers", "2", "--ps", "1",
                  "--steps", "8", "--warmup-steps", "2", "--batch", "8", "--traffic", "-o", str(out), timeout=400)
    assert r.code == 0, r.err
    rows = {(x["from"], x["to"]): x for x in read_runs(out)[0].rows if x["bench"] == "train-traffic"}
    model = load("small_cnn")
    tensors, nbytes = len(model.tensors), model.nbytes
    ps_worker, worker_ps = rows[("ps", "worker")], rows[("worker", "ps")]
    assert ps_worker["steps"] == 8
    for x in (ps_worker, worker_ps):  # RPCs by caller: the PS asks for each gradient, the worker for each variable
        assert x["methods"]["RecvTensor"]["rpcs_step"] >= tensors, x
        assert nbytes < x["bytes_step"] < 1.1 * nbytes, x  # bytes by direction: one model's worth each way
    chief = rows[("chief", "worker")]
    assert chief["rpcs_step"] >= 1 and chief["bytes_step"] < 0.1 * nbytes
    assert "# traffic on the wire, the 8 measured steps" in r.out
