"""A cluster run's verdict from its evidence (evidence.py): the findings, each of a declared kind
(kinds.py), the suspects cleared when measured again, what changed since a baseline run and how each
class of links did against expected values; and the verdict as lines, a drain list's hosts and their
reasons. ``cluster`` (live), ``findings``, ``diff`` and ``report`` all judge through it.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

import numpy as np

from commbench.core.analysis import attribution, kinds
from commbench.core.analysis.attribution import Explanation
from commbench.core.analysis.evidence import BW, ENDPOINT, LAT, Evidence, host_of, label, recheck_ratios
from commbench.core.analysis.kinds import Measure
from commbench.core.analysis.topology import Topology
from commbench.core.errors import UsageError
from commbench.core.measure import outliers
from commbench.core.output.results import Run

WHAT = {"host": "every pair it is in", "switch": "every pair with a host under it",
        "uplink": "every pair through it", "group": "the pairs between these hosts and the others",
        "cable": "this pair alone"}
INSIDE = {"host": "its pairs inside its switch", "switch": "the pairs inside it"}


def _judged(ev: Evidence, measure: Measure, slow_pct: float) -> tuple[list[dict], list[tuple[str, str, str]],
                                                                      list[str]]:
    """One measure's suspects judged by their rechecks: (finding rows, (kind, name, line) of each
    cleared, lines of those not confirmed)."""
    found, cleared, unconfirmed = [], [], []
    cut, ref = measure.cut(slow_pct), ev.reference(measure)
    suspects = ev.suspects(measure, slow_pct)
    measured = [r for r in (recheck_ratios(ev.rechecks.get((measure, label(e)), {}), measure)
                            for e in suspects) if r]
    load = sum(max(x for _, _, x in r) >= cut for r in measured)  # suspects cleared: the load's share
    past = ev.past_the_cap(measure, suspects) if measured else set()
    capped = past if 2 * load > len(measured) else set()
    left: list[str] = []
    share: dict[str, float] = {}  # each finding's share of the reference, alone where measured again
    for e in suspects:
        kind = kinds.slow(e.kind, measure).name
        seen = _effect(e, ref, measure)
        ratios = recheck_ratios(ev.rechecks.get((measure, label(e))) or {}, measure)
        if not ratios and label(e) in capped:  # left out of a plan most of whose suspects cleared
            left.append(f"{e.name} {seen.split(',')[0]}")
            continue
        if ratios:
            n = ev.pairs_at_once(measure, label(e))  # an uplink's: loaded as a round loads it
            how = "again alone {}, a control pair {}" if n < 2 else \
                f"again {n} pairs through it at once, {{}} a pair, as many through another uplink {{}}"
            alone = "; ".join(how.format(*measure.again(p, c)) + f" ({measure.share(r)})" for p, c, r in ratios)
            if max(r for _, _, r in ratios) >= cut:
                cleared.append((kind, e.name, f"{kind} {e.name} cleared: {seen}; {alone}: "
                                              f"{ev.passing_load()}"))
                continue
            seen += f"; {alone}"
        elif len(e.factor.pairs) < 2:  # one pair, once: out of the spread is not enough
            why = ("--budget left no time to measure it again" if ev.budgeted else
                   "more suspects than the rechecks take (one per endpoint)" if label(e) in past else
                   "it was not measured again (a file without its rechecks: an import, or a run that could not)")
            unconfirmed.append(f"{kind} {e.name} not confirmed: {seen}; {why}, and one pair measured once is "
                               "not a finding")
            continue
        else:
            seen += "; not measured again"
        share[e.name] = max((r for _, _, r in ratios), default=e.ratio)
        found.append(_row(ev, e, kind, measure, seen))
    found = _host_cables(found, share, cut, measure, cleared)
    if left:
        unconfirmed.append(f"{measure} suspects: {len(left)} not confirmed ({', '.join(left)}): "
                           f"more than the rechecks take, and {load} of the {len(measured)} measured again "
                           f"were cleared: {'the machine' if ev.serial else 'the tournament'}'s load, not findings")
    return found, cleared, unconfirmed


def _host_cables(found: list[dict], share: dict[str, float], cut: float, measure: Measure,
                 cleared: list[tuple[str, str, str]]) -> list[dict]:
    """The findings less the cables of a slow host that are no slower than it: a host at half its
    rate makes each of its pairs half as fast, and where its pairs also shared uplinks (no topology
    given) some stand out further and are taken for cables; measured again, such a cable is its
    host (its share at least the host's times the cut), and is cleared naming it."""
    host_kind = kinds.slow("host", measure).name
    hosts = {f["a"]: share[f["_name"]] for f in found if f["kind"] == host_kind}
    kept = []
    for f in found:
        if "b" in f:  # a cable
            end = next((h for h in (f["a"], f["b"]) if h in hosts and share[f["_name"]] >= hosts[h] * cut), None)
            if end is not None:
                line = (f"{f['kind']} {f['_name']} cleared: {measure.relative(share[f['_name']], 'the reference')}, "
                        f"as {host_kind} {end} ({measure.share(hosts[end])}): its host's finding")
                cleared.append((f["kind"], f["_name"], line))
                continue
        kept.append(f)
    return kept


def _row(ev: Evidence, e: Explanation, kind: str, measure: Measure, seen: str) -> dict:
    """A finding's row: its kind, what it names (a cable: both ends), its effect and interval, its figure."""
    row = {"kind": kind, "a": e.name.split(" - ")[0] if e.kind == "cable" else e.name, "_name": e.name,
           "note": f"{e.name}: {seen}", "ratio": round(e.ratio, 4), "ratio_lo": round(e.lo, 4),
           "ratio_hi": round(e.hi, 4)}
    if e.kind == "cable":
        row["b"] = e.name.split(" - ")[1]
    row[measure.key] = measure.figure(e.value if e.value is not None else float(np.median(
        [ev.values(measure)[p] for p in e.factor.basis])))
    return row


def findings(ev: Evidence, slow_pct: float) -> tuple[list[dict], list[str]]:
    """(finding rows, lines on suspects cleared when measured again or left unconfirmed: in a budgeted
    run, or past the rechecks' cap where most of those measured again were cleared)."""
    found: list[dict] = []
    cleared: list[tuple[str, str, str]] = []
    unconfirmed: list[str] = []
    for measure in kinds.JUDGED:
        rows, gone, unsure = _judged(ev, measure, slow_pct)
        found, cleared, unconfirmed = found + rows, cleared + gone, unconfirmed + unsure
    found += _across_transports(ev, found, slow_pct)
    for f in found:
        f.pop("_name", None)
    lines = []
    for kind in dict.fromkeys(k for k, _, _ in cleared):  # many of a kind: one line (a loaded tournament)
        mine = [(name, line) for k, name, line in cleared if k == kind]
        lines += [line for _, line in mine] if len(mine) <= 3 else [
            f"{kind}: {len(mine)} suspects cleared when measured alone ({', '.join(n for n, _ in mine[:3])} and "
            f"{len(mine) - 3} more, in the rows recheck): {ev.passing_load(several=True)}"]
    found += _failures(ev, slow_pct)
    found += _ring_findings(ev, slow_pct, found)
    return found, lines + unconfirmed

def _failures(ev: Evidence, slow_pct: float) -> list[dict]:
    """A finding per endpoint the run lost (died or stopped: its pairs failed or were not measured,
    the first failure, and what it was suspected of before, which it cannot be measured again to
    confirm), one per other endpoint in three failed pairs or more, one per failed pair left."""
    suspected: dict[str, list[str]] = {}
    for measure in (BW, LAT):
        for e in ev.suspects(measure, slow_pct, keep_lost=True):
            for lost in {ev.names[i] for i in e.factor.members} & set(ev.lost) if ev._of_lost(e) else ():
                suspected.setdefault(lost, []).append(f"{kinds.slow(e.kind, measure).name} {e.name}")
    count: dict[str, int] = {}
    for row in ev.failed:
        for end in {row.get("a"), row.get("b")}:
            count[str(end)] = count.get(str(end), 0) + 1
    out, told = [], set()
    for end in sorted((e for e in count if e in ev.lost or count[e] >= 3),
                      key=lambda e: (e not in ev.lost, -count[e])):
        mine = [r for r in ev.failed if end in (r.get("a"), r.get("b")) and id(r) not in told]
        if len(mine) < 3 and end not in ev.lost:
            continue
        told |= {id(r) for r in mine}
        first = ev.lost.get(end) or (f"{mine[0].get('test')} round {mine[0].get('round')} {mine[0].get('a')} - "
                                        f"{mine[0].get('b')}: {mine[0].get('error')}")
        note = (f"{end}{' lost' if end in ev.lost else ''}: {len(mine)} pair(s) failed or not measured, "
                f"first {first}")
        if suspected.get(end):
            note += (f"; suspected before it was lost ({', '.join(suspected[end])}): not a finding, as it could "
                     "not be measured again")
        out.append({"kind": "failed", "a": end, "b": None, "note": note})
    return out + [{"kind": "failed", "a": row.get("a"), "b": row.get("b"),
                   "note": f"{row.get('test')} round {row.get('round')} {row.get('a')} - {row.get('b')}: "
                           f"{row.get('error')}"} for row in ev.failed if id(row) not in told]

def _across_transports(ev: Evidence, found: list[dict], slow_pct: float) -> list[dict]:
    """With --transports: each finding says on which transports its pairs are slow too (every one:
    the fabric, a cable or the NIC; one: that transport's stack on the host, e.g. a TCP setting or
    an IPoIB MTU), and what is slow over another transport alone (measured again over it, as any
    suspect is) is a finding of its own."""
    if not ev.via:
        return []
    theirs: dict[str, dict[tuple[str, str], dict]] = {}
    for name, other in ev.via.items():
        rows = [r for r in findings(other, slow_pct)[0] if kinds.is_slow_finding(r)]
        theirs[name] = {(r["kind"], r["a"] + (f" - {r['b']}" if r.get("b") else "")): r for r in rows}
    ours = {(f["kind"], f.get("_name")) for f in found}
    for f in found:
        if f.get("_name") is None:
            continue
        on = [name for name, got in theirs.items() if (f["kind"], f["_name"]) in got]
        every = ", ".join([ev.transport, *on])
        f["note"] += (f"; slow over every transport ({every}): the fabric, a cable or the NIC"
                      if len(on) == len(theirs) else
                      f"; over {ev.transport} only" + (f" and {', '.join(on)}" if on else "") + " (not " +
                      ", ".join(n for n in theirs if n not in on) + "): that transport's stack on the host")
    out = []
    for name, got in theirs.items():
        for key in sorted(set(got) - ours):
            row = dict(got[key])
            row["via"] = name
            row["note"] = f"over {name} only (not {ev.transport}): {row['note']}: that transport's stack"
            out.append(row)
    return out


def _ring_findings(ev: Evidence, slow_pct: float, found: list[dict]) -> list[dict]:
    """A ring link off the ring's median, unless a finding explains it or the same link measured as
    a pair was healthy (every endpoint of a ring streams at once: on shared CPUs one link of eight
    can fall to two thirds of the median without a fault)."""
    share = slow_pct / 100
    named = {f.get("a") for f in found if kinds.is_slow_finding(f) and kinds.kind(f["kind"]).measure is BW}
    named |= {f.get("b") for f in found if f["kind"] == kinds.slow("cable", BW).name}
    med = ev.reference(BW)
    out = []
    for test, rows in ev.rings.items():
        rates = [r["mb_s"] if isinstance(r.get("mb_s"), (int, float)) else np.nan for r in rows]
        for j in outliers.outliers(rates, share, low=True):
            a, b = ev.index.get(rows[j]["a"]), ev.index.get(rows[j]["b"])
            if a is None or b is None or {rows[j]["a"], rows[j]["b"]} & named:
                continue
            alone = float(ev.bw[a, b])
            if alone == alone and alone >= med * (1 - share):
                continue
            out.append({"kind": "slow-ring-link", "a": rows[j]["a"], "b": rows[j]["b"], "mb_s": rates[j],
                        "note": f"{test}: {rows[j]['a']} -> {rows[j]['b']} {rates[j]:.1f} MB/s, the ring's "
                                f"median {outliers.median_mad(rates)[0]:.1f}"})
    return out


def _effect(e: Explanation, ref: float, measure: Measure) -> str:
    unit = measure.unit
    if e.basis == "alone":
        median = f"the median host's {e.reference:.1f} alone"
        return f"{e.value:.1f} {unit} alone beside the best host, {measure.relative(e.ratio, median)}"
    figure = measure.fmt(ref * e.ratio if measure.higher else ref / max(e.ratio, 1e-9))
    reference = f"the reference {measure.fmt(ref)}"
    if e.n == 1:
        return f"{figure}, {measure.relative(e.ratio, reference)}"
    return f"{figure}, {measure.relative(e.ratio, reference, e.lo, e.hi)} over {_over(e)} ({e.low} of {e.n} pairs " \
           f"{measure.bad})"


def _over(e: Explanation) -> str:
    """Which pairs a finding's figure is over: all of its pairs, those inside its switch (a host or a
    switch of an oversubscribed tree judged there), or those no other finding explains."""
    if e.factor.judged is not None and e.kind in INSIDE:
        return INSIDE[e.kind]
    if e.n < len(e.factor.pairs):
        return f"{e.n} of its {len(e.factor.pairs)} pairs, those no other finding explains"
    return WHAT[e.kind]



def verdict(ev: Evidence, slow_pct: float, baseline: tuple[str, Run, Evidence] | None = None,
            expected: list[Expected] | None = None) -> tuple[list[dict], list[str]]:
    """The findings, then what changed since a baseline run ((its file, run, evidence)) and how each
    class of links did against expected values; with the summary lines: the evidence's own, the
    suspects cleared, the baseline's, the reference's. The live run and ``commbench findings`` both
    give their verdict through it."""
    found, cleared = findings(ev, slow_pct)
    summary = [*ev.summary(slow_pct), *cleared]
    if baseline is not None:
        path, run, old = baseline
        moved, lines = changes(old, ev, slow_pct, str(run.meta.get("start", "?"))[:10], f"--baseline {path}", found)
        found, summary = found + moved, summary + lines
    if expected:
        failed, lines = check_reference(ev, expected)
        found, summary = found + failed, summary + lines
    return found, summary


def changes(old: Evidence, new: Evidence, slow_pct: float, since: str, source: str,
            now_found: list[dict]) -> tuple[list[dict], list[str]]:
    """What changed from ``old`` to ``new`` beyond the noise of both runs: attribution over each pair's
    ratio new / old (so a host, switch, uplink or cable that lost is named as itself, and the spread
    of the ratios is the two runs' noise together; the ratios are judged against their own median,
    and a median itself below the cut is ``lost-cluster``; a single cable only where either run named
    it, measured again alone: one pair in two runs is otherwise noise), and the findings that are new
    or gone.
    Rows ``lost-*`` are regressions; ``gained-*``, ``new``, ``fixed``, ``new-host``, ``gone-host`` say what
    else moved. ``now_found``: the new run's findings, as its verdict made them. Raises UsageError
    where the runs share too few endpoints to be the same cluster."""
    common = same_cluster(old.names, new.names, source)
    rows: list[dict] = []
    lines = [f"against the baseline of {since}: {len(common)} endpoints in both"]
    for n in new.names:
        if n not in old.index:
            rows.append({"kind": "new-host", "a": n, "note": f"{n}: not in the baseline of {since}"})
    for n in old.names:
        if n not in new.index:
            rows.append({"kind": "gone-host", "a": n, "note": f"{n}: in the baseline of {since}, not in this run"})
    idx_old, idx_new = [old.index[n] for n in common], [new.index[n] for n in common]
    was_found = findings(old, slow_pct)[0]
    cable = {kinds.slow("cable", m).name: m for m in (BW, LAT)}
    named = {(cable[f["kind"]], frozenset((f.get("a"), f.get("b")))) for f in was_found + now_found
             if f["kind"] in cable}  # cables either run named (measured again alone)
    for measure in (BW, LAT):
        a = old.values(measure)[np.ix_(idx_old, idx_old)]
        b = new.values(measure)[np.ix_(idx_new, idx_new)]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = b / a if measure.higher else a / b
        ratio[~np.isfinite(ratio)] = np.nan
        if not np.isfinite(ratio).any():
            continue
        med = float(np.nanmedian(ratio))
        at = measure.relative(med, "the baseline's")
        lines.append(f"{measure}: the median pair at {at}")
        if med < measure.cut(slow_pct):  # everything moved together: no one part stands out, the whole did
            rows.append({"kind": "lost-cluster" + ("" if measure.higher else "-latency"), "a": "every pair",
                         "ratio": round(med, 4), "note": f"every pair: the median at {at} of {since} ({measure})"})
        rows += _moved(common, new, measure, slow_pct, (a, b, ratio), named, since)
    rows += _new_and_fixed(was_found, now_found, new, since)
    return rows, lines


def _moved(common: list[str], new: Evidence, measure: Measure, slow_pct: float,
           old_new_ratio: tuple[np.ndarray, np.ndarray, np.ndarray], named: set, since: str) -> list[dict]:
    """What lost or gained on ``measure``: attribution over the pairs' ratios new / old."""
    a, b, ratio = old_new_ratio
    rows = []
    d, unit = measure.digits, measure.unit
    for sign, r in (("lost", ratio), ("gained", 1 / ratio)):
        _, found = attribution.explain(common, r, new.topology, measure.cut(slow_pct), True)
        for e in found:
            if e.kind == "cable" and (measure, frozenset(e.name.split(" - "))) not in named:
                continue  # one pair in two runs is noise until either run measured it again alone
            pairs = list(e.factor.pairs)
            before = float(np.nanmedian([a[p] for p in pairs]))
            after = float(np.nanmedian([b[p] for p in pairs]))
            moved = (f"{sign} {abs(after / before - 1) * 100:.0f} %" if measure.higher else
                     f"latency {'up' if after > before else 'down'} {abs(after / before - 1) * 100:.0f} %")
            rows.append({"kind": kinds.changed(sign, e.kind, measure).name,
                         "a": e.name.split(" - ")[0] if e.kind == "cable" else e.name,
                         **({"b": e.name.split(" - ")[1]} if e.kind == "cable" else {}),
                         "ratio": round(e.ratio, 4), "ratio_lo": round(e.lo, 4), "ratio_hi": round(e.hi, 4),
                         "note": f"{e.kind} {e.name} {moved} since {since} ({before:.{d}f} -> {after:.{d}f} "
                                 f"{unit}" + (f", median of {e.n} pairs)" if e.n > 1 else ")")})
    return rows


def _new_and_fixed(was_found: list[dict], now_found: list[dict], new: Evidence, since: str) -> list[dict]:
    """The findings new since the baseline, and those of the baseline the new run measured again and
    did not find (``fixed``); one it did not measure (a ring of a pairwise-only run, a host it left
    out) is neither."""
    was = {(f["kind"], f.get("a"), f.get("b")) for f in was_found if f["kind"] != "failed"}
    now = {(f["kind"], f.get("a"), f.get("b")) for f in now_found if f["kind"] != "failed"}
    rows = []
    for kind, a, b in sorted(now - was, key=str):
        rows.append({"kind": "new", "a": a, "b": b, "note": f"{kind} {a}{' - ' + b if b else ''} (not in the "
                                                          f"baseline of {since})"})
    for kind, a, b in sorted(was - now, key=str):
        if not _measured_again(new, kind, a, b):
            continue
        rows.append({"kind": "fixed", "a": a, "b": b, "note": f"{kind} {a}{' - ' + b if b else ''} (in the "
                                                            f"baseline of {since}, not now)"})
    return rows


def _measured_again(ev: Evidence, kind: str, a: object, b: object) -> bool:
    """Whether ``ev``'s run measured what a finding of ``kind`` naming ``a`` (and ``b``) is about."""
    k = kinds.kind(kind)
    if k.factor == "ring-link":
        return bool(ev.rings)
    values = ev.values(k.measure or BW)
    if k.factor == "cable" or b:
        i, j = ev.index.get(str(a)), ev.index.get(str(b))
        return i is not None and j is not None and bool(np.isfinite(values[i, j]))
    if k.factor == "host":
        i = ev.index.get(str(a))
        return i is not None and bool(np.isfinite(values[i]).any())
    return bool(np.isfinite(values).any())


def same_cluster(old: list[str], new: list[str], source: str) -> list[str]:
    """The endpoints both runs measured; UsageError where they share fewer than half of the new run's."""
    have = set(old)
    common = [n for n in new if n in have]
    if len(common) < 2 or len(common) < len(new) / 2:
        raise UsageError(f"{source}: the baseline shares {len(common)} of this run's {len(new)} endpoints "
                         f"(it measured {', '.join(old[:3])}...): a run of another cluster? Give a baseline "
                         "of the same hosts")
    return common


@dataclass(frozen=True)
class Expected:
    """A reference value for a class of links (ReFrame's reference with its tolerance, and a warn halo)."""

    link: str  # inside (a pair under one switch), across (through an uplink), any
    metric: str  # mb_s or lat_us
    value: float
    warn: float  # percent worse than value that warns
    fail: float  # percent worse than value that fails


REFERENCE_HEADER = ["link", "metric", "expected", "warn_pct", "fail_pct"]


def load_reference(path: str) -> list[Expected]:
    """A reference file: CSV ``link,metric,expected,warn_pct,fail_pct`` (header first, # comments),
    link one of inside, across, any; metric mb_s or lat_us; warn below fail. One line per mistake."""
    from commbench.core.output.results import csv_rows, read_text_file

    text = read_text_file(path, "reference file (CSV: link,metric,expected,warn_pct,fail_pct)")
    out: list[Expected] = []
    seen_header = False
    for no, row in csv_rows(text.splitlines(), f"--reference {path}"):
        cells = [c.strip() for c in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        where = f"--reference {path} line {no}"
        if not seen_header:
            if [c.lower() for c in cells] != REFERENCE_HEADER:
                raise UsageError(f"{where}: the first line must be the header {','.join(REFERENCE_HEADER)}")
            seen_header = True
            continue
        if len(cells) != 5:
            raise UsageError(f"{where}: give 5 cells ({','.join(REFERENCE_HEADER)}), not {len(cells)}")
        link, metric = cells[0].lower(), cells[1].lower()
        if link not in ("inside", "across", "any"):
            raise UsageError(f"{where}: link {cells[0][:20]!r} is not inside, across or any")
        if metric not in ("mb_s", "lat_us"):
            raise UsageError(f"{where}: metric {cells[1][:20]!r} is not mb_s or lat_us")
        try:
            value, warn, fail = (float(c) for c in cells[2:])
        except ValueError:
            raise UsageError(f"{where}: expected, warn_pct and fail_pct are numbers, not {','.join(cells[2:])[:40]!r}"
                             ) from None
        top = 100 if metric == "mb_s" else 1e6  # a bandwidth cannot fall by 100 % or more; a latency can grow
        if not (value > 0 and 0 <= warn < fail < top and np.isfinite(value)):
            raise UsageError(f"{where}: give expected > 0 and 0 <= warn_pct < fail_pct" +
                             (" < 100" if metric == "mb_s" else "") + f", not {value:g}, {warn:g}, {fail:g}")
        out.append(Expected(link, metric, value, warn, fail))
    if not out:
        raise UsageError(f"--reference {path}: no reference line below the header")
    return out


def check_reference(ev: Evidence, expected: list[Expected]) -> tuple[list[dict], list[str]]:
    """Each class of links' median pair against its reference: fail beyond fail_pct worse, warn beyond
    warn_pct (the halo ReFrame's users ask for); the pairs beyond the fail band are counted."""
    rows, lines = [], []
    topo = ev.topology
    k = len(ev.names)
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]

    def crosses(p: tuple[int, int]) -> bool:
        return bool(topo.uplinks(ev.names[p[0]], ev.names[p[1]])) if topo is not None else False

    for x in expected:
        m = ev.bw if x.metric == "mb_s" else ev.lat
        chosen = [float(m[p]) for p in pairs if np.isfinite(m[p]) and
                  (x.link == "any" or (x.link == "across") == crosses(p))]
        label_ = f"{x.link} {x.metric}"
        if not chosen:
            lines.append(f"reference {label_}: no pair of this class measured")
            continue
        med = float(np.median(chosen))
        worse = (x.value - med) / x.value * 100 if x.metric == "mb_s" else (med - x.value) / x.value * 100
        beyond = sum(((x.value - v) / x.value * 100 if x.metric == "mb_s" else (v - x.value) / x.value * 100) > x.fail
                     for v in chosen)
        state = "fail" if worse > x.fail else "warn" if worse > x.warn else "pass"
        text = (f"reference {label_}: median {med:.{1 if x.metric == 'mb_s' else 2}f} against {x.value:g} "
                f"({abs(worse):.0f} % {'worse' if worse > 0 else 'better'}; warn beyond {x.warn:g} % worse, "
                f"fail beyond {x.fail:g} %): {state}; "
                f"{beyond} of {len(chosen)} pairs beyond the fail band")
        lines.append(text)
        if state != "pass":
            rows.append({"kind": f"reference-{state}", "a": label_, "note": text})
    return rows, lines


# -- the verdict as lines and as a drain list -------------------------------------------------
def one_line(text: object) -> str:
    """``text`` as one printable line: control characters escaped, a line break shown as ``\\n``, so
    no text a file or a peer gave can add a line to the verdict or forge one."""
    from commbench.core.output.printable import printable

    return printable(str(text).replace("\r", "\\r").replace("\n", "\\n"))


def findings_lines(endpoints: int, slow_pct: float, summary: list[str], found: list[dict]) -> list[str]:
    """The block below the table (and what ``commbench findings`` prints): one line per summary line
    and per finding."""
    return [f"# findings ({endpoints} endpoints; {slow_pct:g} % below the reference (latency: {2 * slow_pct:g} % "
            f"above; loss: {kinds.LOSS.CUT * 100:g} % more segments sent again), out of the spread, and again when "
            "measured alone):",
            *(f"#   {one_line(s)}" for s in summary),
            *([f"#   {f['kind']}: {one_line(f['note'])}" for f in found] or
              ["#   no outliers: every host, switch and link within the threshold"])]


STATUS = ("ok", "suspect", "lossy", "slow", "lost")  # a host's state in --host-status and --json, the worst last


def host_status(found: list[dict], names: list[str], topo: Topology | None = None) -> dict[str, str]:
    """Each host of the run -> lost (a failed finding names it alone), slow (a finding that drains it
    names it: slow, or slower than the baseline), lossy (a lossy-host finding), suspect (a failing
    finding concerns it without draining it: a cable's or ring link's end, a failed pair's, a host
    under a slow switch or uplink or in a slow group), or ok. A suspect not confirmed when measured
    again is no finding: ok."""
    import hostlist

    out = dict.fromkeys((host_of(n) for n in names), "ok")  # in the run's order
    rank = {s: i for i, s in enumerate(STATUS)}

    def mark(host: str, status: str) -> None:
        if host in out and rank[status] > rank[out[host]]:
            out[host] = status

    for f in found:
        k = kinds.kind(f["kind"])
        a, b = str(f.get("a") or ""), str(f.get("b") or "")
        if k.factor == "endpoint" and not b:
            mark(host_of(a), "lost")
        elif kinds.drains(f):
            mark(host_of(a), "lossy" if k.measure is kinds.LOSS else "slow")
        elif k.fails:
            concerned = [a, b]
            if k.factor in ("switch", "uplink") and topo is not None:
                concerned = [n for n in names if set(a.split(" or ")) & set(topo.chain(topo.switch_of[n]))]
            elif k.factor == "group":
                with contextlib.suppress(Exception):  # a hostlist as the verdict wrote it
                    concerned = hostlist.expand_hostlist(a)
            for n in concerned:
                mark(host_of(n), "suspect")
    return out


REASON = 120  # characters of a drain reason


def drained(found: list[dict]) -> dict[str, str]:
    """Slurm node -> the reason to drain it (the first finding that names it), from the findings whose
    kind drains (kinds.py); an endpoint ``host/rN`` (several ranks a host) is its host. Only names a
    host may have are taken (the evidence refuses others where it reads them); a reason is printable
    ASCII on one line."""
    out: dict[str, str] = {}
    for f in found:
        if not kinds.drains(f) or not ENDPOINT.fullmatch(str(f["a"])):
            continue
        host = host_of(str(f["a"]))
        reason = re.sub(r"[^ -~]+", " ", f"commbench {f['kind']}: {f.get('note') or host}")
        if len(reason) > REASON:  # Slurm shows a node's reason on one line: cut at a word, marked
            reason = reason[:REASON - 3].rsplit(" ", 1)[0] + "..."
        out.setdefault(host, reason.replace('"', "'"))
    return out
