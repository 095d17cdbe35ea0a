"""Every kind of finding a cluster verdict can give, declared once: what it names, what it means,
whether it fails the verdict, whether it drains the host it names, and what it is judged on.

The verdict (verdict.py) makes rows of these kinds; ``findings`` and ``diff`` decide their exit status,
the drain list, the metrics and the results key's documentation from this table, never from the
kind's spelling. A new kind of fault is its entry here and the code that produces its evidence.
"""

from __future__ import annotations

from dataclasses import dataclass

# what a kind names (the factors of attribution.py, and what a run or a comparison adds)
FACTORS = ("host", "switch", "uplink", "group", "cable", "ring-link", "endpoint", "cluster", "links")


@dataclass(frozen=True)
class Measure:
    """A figure pairs are judged on."""

    name: str  # bandwidth, latency
    key: str  # its column in the rows
    unit: str
    higher: bool  # higher is better
    digits: int  # decimals it is shown with
    bad: str = "slow"  # what a pair past the cut is

    def __str__(self) -> str:
        return self.name

    def share(self, goodness: float) -> str:
        """A figure against another as it reads: bandwidth as a share ('32 %'), latency as a factor of the
        other's time ('6.1x'), from its share of the other's goodness (latency: other / figure)."""
        return f"{goodness * 100:.0f} %" if self.higher else f"{1 / max(goodness, 1e-9):.1f}x"

    def relative(self, goodness: float, other: str, lo: float | None = None, hi: float | None = None) -> str:
        """'32 % (95 % CI 26-44 %) of the reference 23.9 MB/s', '6.1x (95 % CI 5.0-7.3x) the reference
        52.11 us': a figure against ``other``, with its interval where given (shares of goodness)."""
        ci = ""
        if lo is not None and hi is not None:
            ci = (f" (95 % CI {lo * 100:.0f}-{hi * 100:.0f} %)" if self.higher else
                  f" (95 % CI {1 / max(hi, 1e-9):.1f}-{1 / max(lo, 1e-9):.1f}x)")
        return f"{self.share(goodness)}{ci} {'of ' if self.higher else ''}{other}"

    def cut(self, slow_pct: float) -> float:
        """The ratio to the reference (as a share of its goodness) below which a pair is slow:
        bandwidth --slow-pct below it; latency twice --slow-pct above it (latency moves more)."""
        share = slow_pct / 100
        return 1 - share if self.higher else 1 / (1 + 2 * share)

    def value(self, row: dict) -> float | None:
        """A row's figure of this measure (None: the row has none)."""
        v = row.get(self.key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def fmt(self, value: float) -> str:
        """A figure as the verdict says it, with its unit."""
        return f"{value:.{self.digits}f} {self.unit}"

    def figure(self, value: float) -> float:
        """A figure as a finding's row keeps it (under ``key``)."""
        return value

    def again(self, probe: float, control: float) -> tuple[str, str]:
        """A recheck's probe and control figures as a finding says them."""
        return f"{probe:.{self.digits}f} {self.unit}", f"{control:.{self.digits}f}"


class Loss(Measure):
    """What TCP had to send again, judged as the share of its data segments it sent once ("clean",
    higher is better: 1 - tcp_retrans / tcp_data_segs), so that hosts, switches, uplinks and cables
    are told apart as for bandwidth; a pair is lossy where it sent again ``CUT`` more of them than
    the reference (the median host's, about none), whatever --slow-pct."""

    CUT = 0.001  # 0.1 % of the segments sent again: where NetBouncer's re-implementation flags a link

    def cut(self, slow_pct: float) -> float:
        return 1 - self.CUT

    def value(self, row: dict) -> float | None:
        n, again = row.get("tcp_data_segs"), row.get("tcp_retrans")
        if not (isinstance(n, int) and isinstance(again, int)) or isinstance(n, bool) or isinstance(again, bool) \
                or n <= 0 or not 0 <= again <= n:
            return None
        return 1 - again / n

    def fmt(self, value: float) -> str:
        return f"{(1 - value) * 100:.{self.digits}f} % of its segments sent again"

    def figure(self, value: float) -> float:
        return round((1 - value) * 100, 4)

    def again(self, probe: float, control: float) -> tuple[str, str]:
        return self.fmt(probe), f"{(1 - control) * 100:.{self.digits}f} %"

    def share(self, goodness: float) -> str:
        return f"{(1 - goodness) * 100:.{self.digits}f} % more"

    def relative(self, goodness: float, other: str, lo: float | None = None, hi: float | None = None) -> str:
        ci = f" (95 % CI {(1 - hi) * 100:.{self.digits}f}-{(1 - lo) * 100:.{self.digits}f} %)" \
            if lo is not None and hi is not None else ""
        return f"{self.share(goodness)}{ci} than {other}"


BANDWIDTH = Measure("bandwidth", "mb_s", "MB/s", True, 1)
LATENCY = Measure("latency", "lat_us", "us", False, 2)
LOSS = Loss("loss", "loss_pct", "%", True, 2, "lossy")
MEASURES = {m.name: m for m in (BANDWIDTH, LATENCY)}  # figures a row carries under the measure's own key
JUDGED = (BANDWIDTH, LATENCY, LOSS)  # what a cluster's pairs are judged on


# what an admin does about a finding, by what it names
ACTIONS = {"host": "drain it (--drain-list) and check its NIC, its cable to its switch, its driver and firmware",
           "switch": "check the switch: every host under it is slow",
           "uplink": "check the switch's uplink: its cables and ports toward the spine",
           "group": "check what these hosts share that no topology names (give --topology to name it)",
           "cable": "check that pair's path: either host's port or cable (the hosts' own pairs are fine)",
           "ring-link": "measure the pair alone (commbench p2p-bandwidth between the two hosts)",
           "endpoint": "drain it (--drain-list): check the node, its network and its commbench log",
           "cluster": "compare the two runs' settings, firmware and software: the whole fabric moved",
           "links": "read its note"}


@dataclass(frozen=True)
class Kind:
    name: str
    factor: str  # what it names (FACTORS)
    source: str  # run (one run's verdict), baseline (against an earlier run), reference (expected values)
    meaning: str  # one sentence: what it says
    fails: bool  # the verdict fails (findings and diff exit 1)
    drains: bool  # the host it names goes on the drain list
    measure: Measure | None = None

    @property
    def action(self) -> str:
        """What to do about it (by what it names)."""
        return ACTIONS[self.factor]

    @property
    def metric(self) -> str:
        """Its label value in the metrics (commbench_findings{kind=...})."""
        return self.name


_WHAT = {"host": "a host slow in every pair it is in", "switch": "a switch slow for every host under it",
         "uplink": "a switch's uplink slow for every pair through it",
         "group": "hosts slow to the others but not among themselves (what they share no topology names)",
         "cable": "one pair slow alone (its cable, or a port of either host)"}
_CHANGED = {"host": "host", "switch": "switch", "uplink": "uplink", "group": "group", "cable": "link"}


def _slow_name(factor: str, measure: Measure) -> str:
    if measure is LOSS:
        return "lossy-link" if factor == "cable" else f"lossy-{factor}"
    return ("slow-link" if factor == "cable" else f"slow-{factor}") + ("" if measure.higher else "-latency")


def _declare() -> dict[str, Kind]:
    out: list[Kind] = []
    for m, tail in ((BANDWIDTH, ""), (LATENCY, "-latency")):
        for factor, what in _WHAT.items():
            out.append(Kind(_slow_name(factor, m), factor, "run",
                            f"{what} ({m.name}), confirmed when measured again alone", fails=True,
                            drains=factor == "host", measure=m))
        for factor, word in _CHANGED.items():
            out.append(Kind(f"lost-{word}{tail}", factor, "baseline",
                            f"a {factor} whose pairs lost {m.name} since the baseline, beyond both runs' noise",
                            fails=True, drains=factor == "host", measure=m))
            out.append(Kind(f"gained-{word}{tail}", factor, "baseline",
                            f"a {factor} whose pairs gained {m.name} since the baseline", fails=False, drains=False,
                            measure=m))
        out.append(Kind(f"lost-cluster{tail}", "cluster", "baseline",
                        f"every pair moved together: the median pair lost {m.name} since the baseline", fails=True,
                        drains=False, measure=m))
    for factor, what in _WHAT.items():
        out.append(Kind(_slow_name(factor, LOSS), factor, "run",
                        f"{what.replace(' slow', ' lossy')} (TCP sent 0.1 % more of its segments again than the "
                        "reference), confirmed when measured again alone", fails=True, drains=factor == "host",
                        measure=LOSS))
    out += [
        Kind("slow-ring-link", "ring-link", "run", "a ring's link off the ring's median, not explained by a finding "
             "and not healthy as a pair", fails=True, drains=False, measure=BANDWIDTH),
        Kind("failed", "endpoint", "run", "an endpoint lost or failing its pairs (a host: drained), or one failed "
             "pair", fails=True, drains=True),
        Kind("new", "links", "baseline", "a finding that the baseline did not have", fails=True, drains=False),
        Kind("fixed", "links", "baseline", "a finding of the baseline that this run measured and did not find",
             fails=False, drains=False),
        Kind("new-host", "host", "baseline", "an endpoint not in the baseline", fails=False, drains=False),
        Kind("gone-host", "host", "baseline", "an endpoint of the baseline not in this run", fails=False,
             drains=False),
        Kind("reference-fail", "links", "reference", "a class of links' median beyond --reference's fail band",
             fails=True, drains=False),
        Kind("reference-warn", "links", "reference", "a class of links' median beyond --reference's warn band",
             fails=False, drains=False),
    ]
    return {k.name: k for k in out}


KINDS = _declare()


def kind(name: str) -> Kind:
    """The declared kind of that name (KeyError: the verdict made a kind no one declared)."""
    return KINDS[name]


def slow(factor: str, measure: Measure) -> Kind:
    """The run's finding for a slow ``factor`` (attribution's kind) judged on ``measure``."""
    return KINDS[_slow_name(factor, measure)]


def changed(sign: str, factor: str, measure: Measure) -> Kind:
    """A baseline comparison's row: ``sign`` lost or gained, for a ``factor`` on ``measure``."""
    return KINDS[f"{sign}-{_CHANGED[factor]}" + ("" if measure.higher else "-latency")]


def fails(row: dict) -> bool:
    return KINDS[row["kind"]].fails


def drains(row: dict) -> bool:
    """Whether a finding row puts the host it names on the drain list: a kind that drains, and for
    ``failed`` an endpoint's own line (one naming a pair names no host alone)."""
    k = KINDS[row["kind"]]
    return k.drains and bool(row.get("a")) and (k.factor != "endpoint" or row.get("b") is None)


def is_slow_finding(row: dict) -> bool:
    """A run's slow-* finding of a host, switch, uplink, group or cable (what attribution names)."""
    k = KINDS[row["kind"]]
    return k.source == "run" and k.factor in _WHAT


def doc() -> str:
    """The results key's documentation: every kind (those judged on latency named once, as -latency)."""
    return "a finding's kind: " + "; ".join(f"{k.name} ({k.meaning})" for k in KINDS.values()
                                           if k.measure is not LATENCY) + \
        "; each kind judged on bandwidth of a host, switch, uplink, group, cable or the cluster also as -latency"
