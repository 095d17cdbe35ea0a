"""Bad input: one line on stderr naming the problem and the fix, exit status 2, no traceback."""

import socket

import pytest
from conftest import commbench, free_port, needs_grpc_cpp


def one_line_exit_2(r, *needles):
    assert r.code == 2, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert "Traceback" not in r.err
    for n in needles:
        assert n in lines[0], lines[0]
    assert r.out == ""


@pytest.mark.parametrize("args,needles", [
    (["p2p-lateny"], ["invalid choice: 'p2p-lateny'", "p2p-latency"]),
    (["p2p-latency", "-t", "carrier-pigeon"],
     ["unknown transport 'carrier-pigeon'", "choose one of grpc, grpc-cpp, ", ", tcp, "]),
    (["p2p-latency", "-m", "4X"], ["bad maximum size '4X'", "K, M or G"]),
    (["p2p-latency", "-m", "4M:1K"], ["minimum 4194304 is larger than maximum 1024", "MIN <= MAX"]),
    (["p2p-latency", "-m", "8,1Q"], ["bad message size '1Q'"]),
    (["p2p-latency", "-i", "0"], ["argument -i/--iterations: must be a whole number from 1", "not 0"]),
    (["p2p-latency", "-i", "-5"], ["argument -i/--iterations: must be a whole number from 1", "not -5"]),
    (["p2p-latency", "-x", "-1"], ["argument -x/--warmup: must be a whole number from 0"]),
    (["p2p-latency", "-i", "ten"], ["-i/--iterations: must be a whole number", "not 'ten'"]),
    (["p2p-latency", "--time", "0"], ["argument --time: must be a finite number above 0"]),
    (["p2p-latency", "--payload", "skew", "--small-size", "2K"], ["small buffer size 2048 B is outside", "[1, 1023]"]),
    (["p2p-latency", "--payload", "uniform", "--large-size", "20M"], ["large buffer size 20971520 B is outside"]),
    (["p2p-latency", "--payload", "random", "--categories", "M"], ["at least two categories"]),
    (["p2p-latency", "--payload", "fractal"], ["unknown model or profile 'fractal'", "resnet50"]),
    (["p2p-latency", "--payload", "zipf:resnet50"], ["unknown model or profile 'zipf:resnet50'"]),
    (["p2p-bandwidth", "-W", "0"], ["argument -W/--window: must be a whole number from 1", "not 0"]),
    (["p2p-latency", "--np", "3"], ["p2p-latency runs on 2 ranks here, not --np 3"]),
    (["p2p-latency", "-t", "grpc", "--poll", "busy"], ["has no busy mode (it has: blocking)", "drop --poll busy"]),
    (["p2p-latency", "-t", "grpc-cpp", "--grpc-mode", "proto"], ["--grpc-mode proto is an option of the grpc, ipoib",
                                                              "not of grpc-cpp", "-t grpc"]),
    (["p2p-latency", "-t", "tcp", "--verbs-op", "write"], ["--verbs-op write is an option of the verbs transport",
                                                            "drop it or use -t verbs"]),
    (["p2p-latency", "-t", "ipoib", "--over", "grpc", "--poll", "busy"], ["has no busy mode (it has: blocking)"]),
    (["p2p-latency", "--timeout", "0"], ["argument --timeout: must be a finite number from 0.1"]),
    (["p2p-latency", "--port", "70000"], ["argument --port: must be a whole number from 0 to 65,535", "not 70000"]),
    (["p2p-latency", "-o", "/nonexistent-dir/x.jsonl"], ["directory '/nonexistent-dir' does not exist"]),
    (["p2p-latency", "-o", "/proc/commbench.jsonl"], ["cannot write the output file", "--output"]),
    (["p2p-latency", "-o", "/tmp"], ["must end in .jsonl or .csv"]),
    (["p2p-latency", "-o", "results.txt"], ["must end in .jsonl or .csv"]),
    (["p2p-latency", "-o", "results.json"], ["must end in .jsonl or .csv"]),
    (["p2p-latency", "-t", "unix", "--hosts", "4"], ["cannot do: many-hosts", "that can: grpc"]),
    (["cluster", "--buffers", "3"], ["unrecognized arguments: --buffers 3", "commbench cluster --help"]),
    (["p2p-latency", "--iface", "nosuch0"], ["no network interface 'nosuch0'", "lo"]),
    (["show", "/nonexistent.jsonl"], ["cannot read results file"]),
    ([], ["the following arguments are required: COMMAND"]),
])
def test_bad_input(args, needles):
    one_line_exit_2(commbench(*args), *needles)


def test_output_dir_is_a_directory(tmp_path):
    d = tmp_path / "d.jsonl"
    d.mkdir()
    one_line_exit_2(commbench("p2p-latency", "-o", str(d)), "is a directory")


def test_rendezvous_port_in_use():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        one_line_exit_2(commbench("p2p-latency", "-m", "8:8", "--port", str(port)),
                        f"cannot listen for the rendezvous on 127.0.0.1:{port}", "--port")


@pytest.mark.parametrize("transport", ["tcp", "grpc", pytest.param("grpc-cpp", marks=needs_grpc_cpp)])
def test_data_port_in_use(transport):
    port = free_port()
    with socket.socket() as s:  # rank 0's data port is P + 1
        s.bind(("127.0.0.1", port + 1))
        s.listen()
        one_line_exit_2(commbench("p2p-latency", "-t", transport, "-m", "8:8", "--port", str(port)),
                        "rank 0", f"127.0.0.1:{port + 1}", "--port")


def test_malformed_results_file(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"type": "meta", "bench": "p2p-latency"}\n{"type": "row", "size": 1\n')
    one_line_exit_2(commbench("show", str(f)), f"{f}:2: not a JSON row")


@pytest.mark.parametrize("command, takes", [("cluster", False), ("allreduce", True), ("p2p-latency", True)])
def test_help_lists_the_payload_options_only_where_they_are_taken(command, takes):
    """cluster plans its own sizes (--lat-size, --bw-size): --payload and its options are not in its
    help, and given anyway they are one line naming its help (bad_input above)."""
    r = commbench(command, "--help")
    flags = ("--payload", "--buffers", "--tensors-per-message", "--categories", "--small-size", "--skew-bias")
    assert r.code == 0 and [f in r.out for f in flags] == [takes] * len(flags), r.out
