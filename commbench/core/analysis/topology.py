"""Which switch each host hangs from and how the switches join: Slurm's ``topology.conf`` (the tree
plugin's file sites already keep) or a two-column ``host,switch`` CSV.

``topology.conf``::

    SwitchName=rack0 Nodes=node[0-3] LinkSpeed=100
    SwitchName=rack1 Nodes=node[4-7]
    SwitchName=spine Switches=rack[0-1]

Node and switch lists are Slurm hostlists (python-hostlist expands them). A flow between two hosts
climbs from each host's switch to their lowest common switch: it crosses the *uplink* of every
switch on the way below that one. Switches with no parent are roots; hosts under two roots cross
both roots' uplinks (Slurm would not schedule such a job; a partial file may still say so).

The file describes the machine, a run uses part of it: every host of the run must be in it, the
others are left out (``for_hosts``). Reading is linear in the file's size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import hostlist

from commbench.core.errors import UsageError
from commbench.core.output.results import csv_rows, read_text_file

MAX_LINES = 1_000_000
MAX_HOSTS = 200_000  # hosts (and switches) a topology file may name: beyond the largest machines' node counts
MAX_LEVELS = 32  # switch levels from a leaf to its root: real trees have 2 to 5
NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")  # used with fullmatch ($ would let a trailing newline in)
KEYS = {"switchname", "nodes", "switches", "linkspeed"}


@dataclass(frozen=True)
class Topology:
    """host -> its (leaf) switch; switch -> its parent switch (absent for a root)."""

    switch_of: dict[str, str]
    parent: dict[str, str] = field(default_factory=dict)

    def chain(self, switch: str) -> list[str]:
        """switch, its parent, ... up to its root."""
        out = [switch]
        while out[-1] in self.parent:
            out.append(self.parent[out[-1]])
        return out

    def uplinks(self, a: str, b: str) -> tuple[str, ...]:
        """The switches whose uplink a flow from host a to host b crosses (none inside one switch)."""
        up_a, up_b = self.chain(self.switch_of[a]), self.chain(self.switch_of[b])
        common = set(up_a) & set(up_b)
        return tuple(s for s in up_a if s not in common) + tuple(s for s in up_b if s not in common)

    def switches(self) -> list[str]:
        """Every switch, leaves in host order first, then the ones above them."""
        seen: dict[str, None] = {}
        for s in self.switch_of.values():
            for x in self.chain(s):
                seen.setdefault(x, None)
        return list(seen)

    def for_hosts(self, hosts: list[str], source: str = "--topology") -> Topology:
        """This topology restricted to a run's hosts, under the run's names. A host may be named by
        its full name or by its short name (before the first dot) where that is unambiguous; a run
        host the file does not place is one UsageError, as is a file that places none of them."""
        short: dict[str, str | None] = {}
        for h in self.switch_of:
            s = h.split(".", 1)[0]
            short[s] = None if s in short and short[s] != h else h
        placed, missing = {}, []
        for h in dict.fromkeys(hosts):
            name = h if h in self.switch_of else short.get(h.split(".", 1)[0])
            if name is None:
                missing.append(h)
            else:
                placed[h] = self.switch_of[name]
        if missing and not placed:
            raise UsageError(f"{source} places none of this run's hosts ({_few(missing)}); is it this cluster's "
                             f"file? It names {_few(list(self.switch_of))}")
        if missing:
            raise UsageError(f"{source} does not place host(s) {_few(missing)} of this run: add them to a switch's "
                             "Nodes= (or a host,switch line), or leave --topology out")
        used = {x for s in placed.values() for x in self.chain(s)}
        return Topology(placed, {k: v for k, v in self.parent.items() if k in used})

    @classmethod
    def from_json(cls, data: object, source: str) -> Topology:
        """A topology as a results file keeps it (checked: a string map each, and a tree)."""
        if not isinstance(data, dict) or not all(_str_map(data.get(k)) for k in ("switch_of", "parent")):
            raise UsageError(f"{source}: the metadata's topology is not a host -> switch table; was the file edited?")
        switches = [*data["switch_of"].values(), *data["parent"], *data["parent"].values()]
        bad = next((n for n in switches if not NAME.fullmatch(n)), None)
        if bad is not None:
            raise UsageError(f"{source}: the metadata's topology names switch {bad[:40]!r}, not a switch name "
                             "(letters, digits, . _ -); was the file edited?")
        topo = cls(dict(data["switch_of"]), dict(data["parent"]))
        _check_tree(topo.parent, source)
        return topo

    def to_conf(self, title: str = "") -> str:
        """The topology as Slurm's topology.conf (hostlists folded by python-hostlist)."""
        lines = [f"# {title}"] if title else []
        by_switch: dict[str, list[str]] = {}
        for h, s in self.switch_of.items():
            by_switch.setdefault(s, []).append(h)
        children: dict[str, list[str]] = {}
        for c, p in self.parent.items():
            children.setdefault(p, []).append(c)
        for s in self.switches():
            parts = [f"SwitchName={s}"]
            if s in by_switch:
                parts.append(f"Nodes={hostlist.collect_hostlist(by_switch[s])}")
            if s in children:
                parts.append(f"Switches={hostlist.collect_hostlist(children[s])}")
            lines.append(" ".join(parts))
        return "\n".join(lines) + "\n"


def _str_map(v: object) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())


def _few(names: list[str], n: int = 4) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def _parts(text: str) -> list[str]:
    """A hostlist split at its top-level commas (what is left with a bracket open: one last part)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and not depth:
            parts.append(text[start:i])
            start = i + 1
    return [p for p in (*parts, text[start:]) if p]


def _expand(text: str, where: str, room: int) -> list[str]:
    """A hostlist's names, refused once they would pass ``room`` (expanded one top-level part at a
    time: a few bytes of ranges can name millions of hosts)."""
    names: list[str] = []
    for part in _parts(text):
        try:
            names += hostlist.expand_hostlist(part)
        except hostlist.BadHostlist as exc:
            raise UsageError(f"{where}: {text[:60]!r} is not a Slurm hostlist ({exc}); e.g. node[0-15]") from None
        if len(names) > room:
            _too_many(where)
    bad = next((n for n in names if not NAME.fullmatch(n)), None)
    if bad is not None:
        raise UsageError(f"{where}: {bad[:60]!r} is not a host or switch name (letters, digits, . _ -)")
    return names


def _too_many(where: str) -> None:
    raise UsageError(f"{where}: the file names more than {MAX_HOSTS:,} hosts or switches: not a cluster's topology "
                     "(is a range too wide?)")


def _check_tree(parent: dict[str, str], where: str) -> None:
    """No switch above itself, none more than MAX_LEVELS below its root (linear: each switch's chain
    is walked once, its levels kept)."""
    levels: dict[str, int] = {}  # switch -> levels up to its root; -1: on the chain being walked
    for start in parent:
        chain, s = [], start
        while s in parent and s not in levels:
            levels[s] = -1
            chain.append(s)
            s = parent[s]
        if levels.get(s) == -1:
            raise UsageError(f"{where}: switch {s} is above itself (a loop in Switches=); a topology is a tree")
        above = levels.get(s, 0)
        for x in reversed(chain):
            above += 1
            levels[x] = above
        if above > MAX_LEVELS:
            raise UsageError(f"{where}: switch {start} is {above} levels below its root; a cluster's tree has at most "
                             f"{MAX_LEVELS}")


def parse_conf(text: str, where: str) -> Topology:
    """Slurm's topology.conf (tree): SwitchName=, Nodes=, Switches=, LinkSpeed= (read, not used)."""
    switch_of: dict[str, str] = {}
    parent: dict[str, str] = {}
    defined: set[str] = set()
    for no, raw in enumerate(text.splitlines()[:MAX_LINES], 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        here = f"{where} line {no}"
        fields: dict[str, str] = {}
        for word in line.split():
            k, eq, v = word.partition("=")
            if not eq or k.lower() not in KEYS:
                hint = " (the block plugin's file: only the tree plugin's SwitchName= lines are read)" \
                    if k.lower() in ("blockname", "blocksizes") else ""
                raise UsageError(f"{here}: {word[:40]!r} is not SwitchName=, Nodes=, Switches= or LinkSpeed={hint}")
            if k.lower() in fields:
                raise UsageError(f"{here}: {k}= given twice")
            fields[k.lower()] = v
        name = fields.get("switchname")
        if not name or not NAME.fullmatch(name):
            raise UsageError(f"{here}: each line names its switch: SwitchName=NAME (letters, digits, . _ -)")
        if name in defined:
            raise UsageError(f"{here}: switch {name} is defined twice")
        defined.add(name)
        if len(defined) > MAX_HOSTS:
            _too_many(where)
        for h in _expand(fields.get("nodes", ""), here, MAX_HOSTS - len(switch_of)) if fields.get("nodes") else []:
            if h in switch_of:
                raise UsageError(f"{here}: host {h} is already under switch {switch_of[h]}; a host hangs from one "
                                 "switch")
            switch_of[h] = name
        for c in _expand(fields.get("switches", ""), here, MAX_HOSTS - len(parent)) if fields.get("switches") else []:
            if c in parent:
                raise UsageError(f"{here}: switch {c} is already under {parent[c]}; a switch has one parent")
            if c == name:
                raise UsageError(f"{here}: switch {c} is above itself (a loop in Switches=); a topology is a tree")
            parent[c] = name
    unknown = sorted(set(parent) - defined)
    if unknown:
        raise UsageError(f"{where}: Switches= names {_few(unknown)}, defined by no SwitchName= line")
    if not switch_of:
        raise UsageError(f"{where}: no Nodes= in any line: the file places no host under a switch")
    _check_tree(parent, where)
    return Topology(switch_of, parent)


def parse_csv(text: str, where: str) -> Topology:
    """Two columns, host and switch (a header line ``host,switch`` may come first); one switch level."""
    switch_of: dict[str, str] = {}
    for no, row in csv_rows(text.splitlines(), where):
        cells = [c.strip() for c in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        if no == 1 and [c.lower() for c in cells] == ["host", "switch"]:
            continue
        if len(cells) != 2 or not all(NAME.fullmatch(c) for c in cells):
            raise UsageError(f"{where} line {no}: give host,switch (two names of letters, digits, . _ -), not "
                             f"{','.join(cells)[:60]!r}")
        h, s = cells
        if h in switch_of and switch_of[h] != s:
            raise UsageError(f"{where} line {no}: host {h} is already under switch {switch_of[h]}")
        switch_of[h] = s
        if len(switch_of) > MAX_HOSTS:
            _too_many(where)
    if not switch_of:
        raise UsageError(f"{where}: no host,switch line in the file")
    return Topology(switch_of)


def load(path: str) -> Topology:
    """A topology file: Slurm's topology.conf, or a .csv of host,switch."""
    text = read_text_file(path, "topology file (Slurm's topology.conf or a host,switch CSV)")
    where = f"--topology {path}"
    return parse_csv(text, where) if path.lower().endswith(".csv") else parse_conf(text, where)
