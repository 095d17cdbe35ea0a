"""ReFrame checks that run commbench: a point-to-point latency and bandwidth check and a cluster
evaluation, with per-system references, so a site that tracks performance with ReFrame adds commbench
as it adds any test.

    reframe -c contrib/reframe/commbench_checks.py -r                 # ReFrame's generic system
    reframe -C site.py -c contrib/reframe/commbench_checks.py -r -S transport=mpi

``commbench`` must be on PATH in the check's environment (a venv's bin, a module). The checks launch
commbench the way the system's partition launches jobs (``self.job.launcher``: srun under Slurm, the
local launcher on ReFrame's generic system, where commbench starts its own ranks). Add your systems'
expected values to ``reference`` (value, lower bound, upper bound as fractions, unit): a run outside
them fails the check. The figures are read from commbench's results files (JSONL rows), never from
its printed tables; ``commbench cluster``'s verdict is ``commbench findings --json``'s; the drain list,
the verdict and the findings are kept in the stage directory.
"""

import json
import os

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import performance_function, run_before, sanity_function, variable


@sn.deferrable
def row_value(path, key, size):
    """``key`` of the results row of message size ``size`` in a commbench JSONL file."""
    with open(path) as f:
        rows = [r for r in map(json.loads, f) if r.get("type") == "row" and r.get("size") == size]
    if not rows:
        raise ValueError(f"{path}: no row of size {size}")
    return float(rows[-1][key])


@sn.deferrable
def verdict_value(path, *keys):
    """A field of ``commbench findings --json``'s document (keys: the path into it)."""
    with open(path) as f:
        value = json.load(f)
    for k in keys:
        value = value[k]
    return value


@sn.deferrable
def written(path):
    return os.path.isfile(path) and os.path.getsize(path) > 0


@rfm.simple_test
class CommbenchP2P(rfm.RunOnlyRegressionTest):
    """One-way latency of 8 B and bandwidth of 4 MiB between two ranks (two nodes under Slurm)."""

    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    transport = variable(str, value="tcp")
    num_tasks = 2
    num_tasks_per_node = 1
    executable = "commbench"
    time_limit = "10m"
    keep_files = ["lat.jsonl", "bw.jsonl"]
    reference = {
        # "mycluster:compute": {"latency_8B": (2.5, None, 0.5, "us"), "bandwidth_4M": (11000, -0.2, None, "MB/s")},
        "*": {"latency_8B": (None, None, None, "us"), "bandwidth_4M": (None, None, None, "MB/s")},
    }

    @run_before("run")
    def commands(self):
        local = self.current_partition.scheduler.registered_name == "local"
        if local:  # ReFrame's local scheduler starts one process: commbench's own launcher starts the ranks
            self.num_tasks = self.num_tasks_per_node = 1
        self.executable_opts = ["p2p-latency", "-t", self.transport, "-m", "8:8", "-i", "2000", "-o", "lat.jsonl"]
        self.postrun_cmds = [("" if local else f"{self.job.launcher.run_command(self.job)} ") +
                             f"commbench p2p-bandwidth -t {self.transport} -m 4M:4M -o bw.jsonl"]

    @sanity_function
    def measured(self):
        return sn.all([sn.assert_gt(row_value("lat.jsonl", "p50_us", 8), 0),
                       sn.assert_gt(row_value("bw.jsonl", "mb_s", 4194304), 0)])

    @performance_function("us")
    def latency_8B(self):  # noqa: N802 (ReFrame's name for the figure)
        return row_value("lat.jsonl", "p50_us", 8)

    @performance_function("MB/s")
    def bandwidth_4M(self):  # noqa: N802
        return row_value("bw.jsonl", "mb_s", 4194304)


@rfm.simple_test
class CommbenchCluster(rfm.RunOnlyRegressionTest):
    """Every pair of the allocation's nodes, then the verdict: passes when the findings name no fault
    (a slow or lost host, cable, switch or uplink); the hosts to drain are in drain.txt."""

    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    transport = variable(str, value="tcp")
    nodes = variable(int, value=4)  # under Slurm, the nodes to test; on the local scheduler, the ranks
    extra = variable(str, value="--tests pairwise")
    executable = "commbench"
    time_limit = "30m"
    keep_files = ["cluster.jsonl", "findings.txt", "verdict.json", "hosts.txt", "drain.txt", "drain.txt.reasons"]
    reference = {
        "*": {"pair_bandwidth": (None, None, None, "MB/s")},
    }

    @run_before("run")
    def commands(self):
        local = self.current_partition.scheduler.registered_name == "local"
        self.num_tasks = 1 if local else self.nodes
        self.num_tasks_per_node = 1
        self.executable_opts = ["cluster", "-t", self.transport, *(["--np", str(self.nodes)] if local else []),
                                *self.extra.split(), "-o", "cluster.jsonl"]
        self.postrun_cmds = ["commbench findings cluster.jsonl --json verdict.json --host-status hosts.txt "
                             "--drain-list drain.txt > findings.txt || true"]

    @sanity_function
    def verdict(self):
        return sn.all([sn.assert_true(written("verdict.json"), msg="no verdict: see the job's stderr"),
                       sn.assert_eq(verdict_value("verdict.json", "exit"), 0,
                                    msg="the findings name a fault: see findings.txt, hosts.txt and drain.txt")])

    @performance_function("MB/s")
    def pair_bandwidth(self):
        return verdict_value("verdict.json", "reference", "mb_s")
