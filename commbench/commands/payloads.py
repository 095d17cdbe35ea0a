"""``commbench payloads list|show|profile``: the shipped gradient profiles and how to make one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from commbench.commands import command
from commbench.core.config.options import NoOptions, Options, opt
from commbench.core.errors import UsageError
from commbench.core.output.paths import check_target
from commbench.core.output.table import Column, header_line, row_line
from commbench.profiles import store

LIST = [Column("name", "Profile", -20), Column("tensors", "Tensors", 8, "{:d}"), Column("mb", "MB", 9, "{:.2f}"),
        Column("params", "Params(M)", 10, "{:.2f}"), Column("S", "S", 5, "{:d}"), Column("M", "M", 5, "{:d}"),
        Column("L", "L", 5, "{:d}"), Column("large_share", "L bytes", 8, "{:.1%}")]


@dataclass(frozen=True)
class ShowProfileOptions(Options):
    name: str = opt("", "name", help="the profile (commbench payloads list)")


@dataclass(frozen=True)
class ProfileOptions(Options):
    model: str | None = opt(None, help="resnet50, resnet152, inception_v3, inception_resnet_v2, vgg16, mobilenet_v2, "
                                       "bert_base, small_cnn; or module.path:function returning a Keras model; or a "
                                       "SavedModel directory (required)")
    output: str | None = opt(None, "-o", "--output", help="CSV to write (default: payloads/MODEL.csv)")


def add_parser(sub) -> None:
    p = sub.add_parser("payloads", help="gradient-tensor profiles of real DNNs: list, show, profile")
    ps = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    ps.required = True
    command(ps, "list", NoOptions, list_, help="the profiles found (payloads/ and $COMMBENCH_PAYLOADS)")
    command(ps, "show", ShowProfileOptions, show, help="one profile: Small / Medium / Large histogram, largest tensors")
    command(ps, "profile", ProfileOptions, profile,
            help="build a model with TensorFlow and record its trainable variables")


def row(prof: store.Profile) -> dict:
    h = prof.histogram()
    return {"name": prof.name, "tensors": len(prof.tensors), "mb": prof.nbytes / 1e6, "params": prof.parameters / 1e6,
            "S": h["S"][0], "M": h["M"][0], "L": h["L"][0], "large_share": h["L"][1] / prof.nbytes}


def list_(o: NoOptions) -> int:
    print("# gradient-tensor profiles (trainable variables); MB = 10^6 B; S < 1 KiB <= M < 1 MiB <= L")
    print(header_line(LIST))
    for name in store.known():
        print(row_line(LIST, row(store.load(name))))
    return 0


def show(o: ShowProfileOptions) -> int:
    prof = store.load(o.name)
    for k, v in prof.meta.items():
        print(f"# {k}: {v}")
    h = prof.histogram()
    print(f"{len(prof.tensors)} tensors, {prof.nbytes / 1e6:.2f} MB, {prof.parameters:,} parameters")
    for c, label in (("S", "Small  [1 B, 1 KiB)"), ("M", "Medium [1 KiB, 1 MiB)"), ("L", "Large  [1 MiB, ...)")):
        n, b = h[c]
        print(f"  {label:22s} {n:5d} tensors {b / 1e6:10.2f} MB {b / prof.nbytes:7.1%} of bytes")
    print("largest tensors:")
    for t in sorted(prof.tensors, key=lambda t: -t.nbytes)[:5]:
        print(f"  {t.name:50s} {'x'.join(map(str, t.shape)):>18s} {t.nbytes / 1e6:9.2f} MB")
    return 0


def profile(o: ProfileOptions) -> int:
    from commbench.profiles.models import profile as make

    if not o.model:
        raise UsageError("payloads profile needs --model MODEL (see 'commbench payloads profile --help')")
    out = Path(o.output) if o.output else store.search_path()[-1] / f"{o.model}.csv"
    if o.output:  # before TensorFlow is imported and the model built
        check_target(o.output, "payload profile", "choose another -o")
    n, params = make(o.model, out)
    print(f"{out}: {n} trainable tensors, {params:,} parameters")
    return 0
