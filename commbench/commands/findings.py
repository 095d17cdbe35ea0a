"""``commbench findings FILE [--slow-pct P] [--topology FILE] [--baseline OLD] [--reference REF]`` and
``commbench diff OLD NEW``: a cluster run's verdict, derived again from its results file alone, as the
run derived it (core/analysis/verdict.py): the same rows give the same findings. ``--topology``
judges a run with a topology it was not given; ``--slow-pct`` at another threshold; ``--baseline``
(or ``diff``) says what changed since an earlier run of the same cluster beyond the noise of both;
``--reference`` checks each class of links against expected values with a warn and a fail band.
Exit status 0: nothing wrong (warnings allowed); 1: a finding, a regression or a reference failed;
2: bad input. A cron job or a Slurm health check can act on it: ``--drain-list FILE`` writes the hosts
to drain (a slow host, a host lost or failing its pairs, one that lost bandwidth since the baseline)
as one Slurm hostlist line (``scontrol update nodename=$(cat FILE) state=drain reason=...``), and
each host's reason in FILE.reasons (host, a tab, the finding); commbench never drains a node itself.
``--metrics FILE`` writes each link's and each host's figures and the findings per kind in the
OpenMetrics/Prometheus text format (prometheus_client), for node_exporter's textfile collector.
``--json FILE`` writes the verdict as one JSON document (each finding: its kind, what it names, its
effect and interval, whether it was measured again, whether it fails and drains, what to do; each
host's state); ``--host-status FILE`` a line per host, ``HOST<tab>ok|suspect|lossy|slow|lost``, to grep.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from datetime import datetime

from commbench.commands import command
from commbench.core.analysis import kinds
from commbench.core.analysis.evidence import Evidence, read_evidence, recheck_ratios
from commbench.core.analysis.kinds import MEASURES
from commbench.core.analysis.verdict import drained, findings_lines, host_status, load_reference, one_line, verdict
from commbench.core.config.argtypes import number
from commbench.core.config.options import Options, opt
from commbench.core.errors import UsageError
from commbench.core.output.paths import check_target, write_whole


@dataclass(frozen=True)
class Judging(Options):
    """How a cluster run is judged again: the threshold, the topology, expected values."""

    slow_pct: float | None = opt(None, type=number(above=0, hi=99, what=" (percent)"),
                                 help="the threshold (default: the run's own --slow-pct)")
    topology: str | None = opt(None, metavar="FILE", help="Slurm's topology.conf or a host,switch CSV (default: the "
                                                          "run's own, if it had one)")
    reference: str | None = opt(None, metavar="REF",
                                help="expected values: CSV link,metric,expected,warn_pct,fail_pct")
    metrics: str | None = opt(None, metavar="FILE",
                              help="write each link's and host's figures and the findings per kind in the Prometheus "
                                   "text format (node_exporter's textfile collector: a .prom file)")
    drain_list: str | None = opt(None, metavar="FILE",
                                 help="write the hosts to drain as a Slurm hostlist (one line; empty: none) and their "
                                      "reasons to FILE.reasons")
    json: str | None = opt(None, metavar="FILE", help="write the verdict as JSON: each finding (kind, what it names, "
                                                      "effect, measured again, fails, drains, what to do) and each "
                                                      "host's state")
    host_status: str | None = opt(None, metavar="FILE", help="write a line per host: HOST, a tab, ok, suspect, "
                                                             "lossy, slow or lost")


@dataclass(frozen=True)
class FindingsOptions(Judging):
    file: str = opt("", "file", metavar="FILE", help="a results file of commbench cluster (.jsonl or .csv)")
    baseline: str | None = opt(None, metavar="OLD", help="an earlier run's results file: what changed since")


@dataclass(frozen=True)
class DiffOptions(Judging):
    baseline: str = opt("", "baseline", metavar="OLD", help="the earlier run's results file")
    file: str = opt("", "file", metavar="NEW", help="the later run's results file")


DRAIN_FIX = "give --drain-list a new file, or a regular one, in a directory of your own"
METRICS_FIX = "give --metrics a new file, or a regular one, in a directory of your own"
OUT_FIX = "give {} a new file, or a regular one, in a directory of your own"


def add_parser(sub) -> None:
    command(sub, "findings", FindingsOptions, run, help="a cluster run's findings, derived again from its results "
                                                        "file (exit 1: a finding or a regression)",
            description=__doc__.split("\n\n")[0].replace("``", ""))
    command(sub, "diff", DiffOptions, run, help="what changed between two cluster runs beyond the noise of both (exit "
                                                "1: a regression)",
            description="commbench diff OLD NEW: commbench findings NEW --baseline OLD.")


def derive(path: str, slow_pct: float | None = None, topo_file: str | None = None, baseline: str | None = None,
           reference: str | None = None, metrics: str | None = None, acts: tuple[str, ...] = (),
           json_path: str | None = None,
           status_path: str | None = None) -> tuple[list[str], int, list[dict], list[tuple[str, str]]]:
    """(the lines, how many findings, regressions and failed references, the finding rows, (file, name)
    of each endpoint name the files gave that is no host's); with ``metrics``, the run's figures written
    there; with ``json_path`` and ``status_path``, the verdict and each host's state."""
    expected = load_reference(reference) if reference else None
    run, ev = read_evidence(path, topo_file)
    acts = (*acts, *(["--metrics"] if metrics else []))
    if acts and run.meta.get("options", {}).get("fabric") == "sim":
        raise UsageError(f"{path} is a simulated run (cluster --fabric sim): {' and '.join(acts)} would act on hosts "
                         "nothing measured; leave it out (the findings are printed without it)")
    pct = slow_pct if slow_pct is not None else run.meta["options"].get("slow_pct", 25.0)
    if not isinstance(pct, (int, float)) or not 0 < pct < 100:
        raise UsageError(f"{path}: the run's slow_pct is {str(pct)[:20]!r}, not a percentage; give --slow-pct")
    old = (baseline, *read_evidence(baseline, topo_file)) if baseline else None
    found, summary = verdict(ev, float(pct), old, expected)
    summary.insert(0, f"derived again from {path} (run {run.meta.get('run_id', '?')} of {run.meta.get('start', '?')}, "
                      f"{run.meta.get('options', {}).get('transport', '?')})")
    bad = [f for f in found if kinds.fails(f)]
    if metrics:
        write_metrics(metrics, run.meta, ev, found)
    status = host_status(found, ev.names, ev.topology)
    if json_path:
        doc = {"file": path, "run_id": run.meta.get("run_id"), "start": run.meta.get("start"),
               "transport": (run.meta.get("options") or {}).get("transport"), "slow_pct": float(pct),
               "exit": 1 if bad else 0, "reference": reference_figures(ev),
               "findings": [finding_record(f, ev) for f in found], "hosts": status}
        write_whole(json_path, (json.dumps(doc, indent=1) + "\n").encode(), "JSON verdict", OUT_FIX.format("--json"))
    if status_path:
        write_whole(status_path, "".join(f"{h}\t{v}\n" for h, v in status.items()).encode(), "host status file",
                    OUT_FIX.format("--host-status"))
    refused = [(path, n) for n in ev.refused] + [(str(baseline), n) for n in (old[2].refused if old else [])]
    return findings_lines(len(ev.names), float(pct), summary, found), len(bad), found, refused


def reference_figures(ev: Evidence) -> dict[str, float | None]:
    """The run's reference pair (the median host's), in its rows' units: null where not measured."""
    import numpy as np

    out: dict[str, float | None] = {}
    for m in MEASURES.values():
        v = ev.reference(m) if np.isfinite(ev.values(m)).any() else float("nan")
        out[m.key] = round(v, 4) if v == v else None
    return out


def finding_record(f: dict, ev: Evidence) -> dict:
    """A finding for --json: its row's fields, what its kind declares, and whether it was measured
    again (a slow-* finding: its suspect's rechecks, over any transport; other kinds: null)."""
    k = kinds.kind(f["kind"])
    again = None
    if kinds.is_slow_finding(f) and k.measure is not None:
        suspect = f"cable {f.get('a')} - {f.get('b')}" if k.factor == "cable" else f"{k.factor} {f.get('a')}"
        again = any(recheck_ratios(e.rechecks.get((k.measure, suspect), {}), k.measure)
                    for e in (ev, *ev.via.values()))
    keep = ("a", "b", "ratio", "ratio_lo", "ratio_hi", "mb_s", "lat_us", "note")
    return {"kind": k.name, "names": k.factor, **{x: f[x] for x in keep if f.get(x) is not None},
            "measured_again": again, "fails": k.fails, "drains": kinds.drains(f), "action": k.action}


def write_metrics(path: str, meta: dict, ev, found: list[dict]) -> None:
    """The run's figures in the Prometheus text format, written as node_exporter's textfile collector
    wants it (a temporary file renamed into place: write_whole): per link (a pair of hosts) its
    bandwidth and latency, per host the median of its pairs; the findings per kind, each finding, and
    per host (every declared kind and every endpoint of the run with its 0: a zero is not a missing
    series); when the run started. Base units (bytes/s, seconds), as Prometheus' conventions ask.
    Labels: hosts, the transport, the cluster's endpoints."""
    import numpy as np

    try:
        from prometheus_client import CollectorRegistry, Gauge, generate_latest
    except ImportError:
        raise UsageError("--metrics needs prometheus_client: pip install 'commbench[metrics]'") from None

    transport = str((meta.get("options") or {}).get("transport") or "?")
    reg = CollectorRegistry()
    figures = (("bandwidth_bytes_per_second", ev.bw, 1e6, "bandwidth, bytes/s (osu_bw-style)"),
               ("latency_seconds", ev.lat, 1e-6, "one-way p50 latency, seconds"))
    for m, values, scale, doc in figures:  # Prometheus' base units: the rows' MB/s and us scaled
        link = Gauge(f"commbench_link_{m}", f"a pair's {doc}", ["a", "b", "transport"], registry=reg)
        host = Gauge(f"commbench_host_{m}", f"the median over the host's pairs: {doc}", ["host", "transport"],
                     registry=reg)
        for i, a in enumerate(ev.names):
            for j in range(i + 1, len(ev.names)):
                if np.isfinite(values[i, j]):
                    link.labels(a, ev.names[j], transport).set(float(values[i, j]) * scale)
            if np.isfinite(values[i]).any():
                host.labels(a, transport).set(float(np.nanmedian(values[i])) * scale)
    each = Gauge("commbench_finding", "one series per finding of the run: its kind, what it names (a: the host, "
                 "switch or one end of a cable; b: the cable's other end)", ["kind", "a", "b", "transport"],
                 registry=reg)
    per_host = Gauge("commbench_host_findings", "the findings naming the host, every endpoint of the run (0: "
                     "none)", ["host", "transport"], registry=reg)
    named: dict[str, int] = dict.fromkeys(ev.names, 0)
    for f in found:
        each.labels(f["kind"], str(f.get("a") or ""), str(f.get("b") or ""), transport).set(1)
        for end in {f.get("a"), f.get("b")} & named.keys():
            named[str(end)] += 1
    for h, n in named.items():
        per_host.labels(h, transport).set(n)
    per_kind = Gauge("commbench_findings", "findings of the run, by kind", ["kind", "transport"], registry=reg)
    for k in kinds.KINDS.values():
        per_kind.labels(k.metric, transport).set(sum(f["kind"] == k.name for f in found))
    started = Gauge("commbench_run_start_timestamp_seconds", "when the run started", ["transport"], registry=reg)
    with contextlib.suppress(TypeError, ValueError):
        started.labels(transport).set(datetime.fromisoformat(str(meta.get("start"))).timestamp())
    write_whole(path, generate_latest(reg), "metrics file", METRICS_FIX)


def write_drain_list(path: str, hosts: dict[str, str]) -> None:
    """The hosts as one Slurm hostlist line (empty: none), their reasons in ``path``.reasons (host, a
    tab, the reason), each file replaced whole."""
    import hostlist

    write_whole(path + ".reasons", "".join(f"{h}\t{why}\n" for h, why in sorted(hosts.items())).encode(),
                "drain list's reasons", DRAIN_FIX)
    write_whole(path, (hostlist.collect_hostlist(sorted(hosts)) + "\n" if hosts else "").encode(), "drain list",
                DRAIN_FIX)


def run(o: FindingsOptions | DiffOptions) -> int:
    for path, what, fix in ((o.drain_list, "drain list", DRAIN_FIX), (o.drain_list and o.drain_list + ".reasons",
                            "drain list's reasons", DRAIN_FIX), (o.metrics, "metrics file", METRICS_FIX),
                            (o.json, "JSON verdict", OUT_FIX.format("--json")),
                            (o.host_status, "host status file", OUT_FIX.format("--host-status"))):
        if path:  # before anything is read or printed
            check_target(path, what, fix)
    lines, count, found, refused = derive(o.file, o.slow_pct, o.topology, o.baseline or None, o.reference, o.metrics,
                                          ("--drain-list",) if o.drain_list else (), o.json, o.host_status)
    print("\n".join(lines))
    if o.drain_list:
        hosts = drained(found)
        write_drain_list(o.drain_list, hosts)
        print(f"# drain list: {len(hosts)} host(s) written to {o.drain_list}" + (
            f" ({', '.join(hosts)}); reasons in {o.drain_list}.reasons" if hosts else ""))
    if refused:  # after the verdict on the rest: a forged name must not keep the slow hosts from the drain list
        source, first = refused[0]
        raise UsageError(f"{source}: {len(refused)} endpoint name(s) that are no host's ({one_line(first[:60])!r}"
                         f"{' and more' if len(refused) > 1 else ''}: letters, digits, . _ - only): their rows were "
                         "left out of the verdict and the drain list; was the file edited?")
    return 1 if count else 0
