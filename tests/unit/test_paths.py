"""Every output path goes through core/output/paths.py: a regular file or a new name is written; a
directory, FIFO, device, socket or symbolic link there is refused in one line and left as it was."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from commbench.core.errors import ResultsError, UsageError
from commbench.core.output import paths
from commbench.core.output.results import ResultsWriter, check_output_path

KINDS = ["directory", "fifo", "socket", "link", "device"]


def plant(tmp_path, kind: str):
    """A path of the given kind, and a check that it is still what it was."""
    p = tmp_path / "out.jsonl"
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    if kind == "directory":
        p.mkdir()
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        s.close()
    elif kind == "link":
        p.symlink_to(victim)
    elif os.geteuid() == 0:  # /dev/null's own numbers: what root would have replaced
        os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    else:
        pytest.skip("making a device node takes root")
    before = os.lstat(p).st_mode
    return str(p), lambda: os.lstat(p).st_mode == before and victim.read_text() == "keep\n"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("write", [
    lambda p: check_output_path(p),
    lambda p: paths.write_whole(p, b"new\n", "drain list", "give another"),
    lambda p: ResultsWriter(p, {"type": "meta"}, ["a"]),
])
def test_what_is_not_a_regular_file_is_refused_and_left_alone(tmp_path, kind, write):
    path, intact = plant(tmp_path, kind)
    with pytest.raises((UsageError, ResultsError)) as err:
        write(path)
    said = str(err.value)
    assert "\n" not in said and path in said
    assert ("symbolic link" if kind == "link" else "not a regular file") in said
    assert intact()


def test_a_link_in_a_report_folder_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "page.html").symlink_to(victim)
    paths.write_whole(str(tmp_path / "page.html"), b"page", "report file", "x", replace_link=True)
    assert victim.read_text() == "keep\n" and (tmp_path / "page.html").read_bytes() == b"page"
    assert not (tmp_path / "page.html").is_symlink()


def test_a_whole_file_replaces_a_regular_one_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "drain"
    p.write_text("old\n")
    paths.write_whole(str(p), b"n1\n", "drain list", "x")
    assert p.read_text() == "n1\n" and sorted(f.name for f in tmp_path.iterdir()) == ["drain"]


def test_rows_are_appended_to_jsonl_and_replace_csv(tmp_path):
    for name, kept in (("r.jsonl", True), ("r.csv", False)):
        p = tmp_path / name
        p.write_text("# before\n")
        w = ResultsWriter(p, {"type": "meta"}, ["a"])
        w.row({"a": 1})
        w.close()
        assert p.read_text().startswith("# before\n") == kept


def test_a_missing_folder_and_another_users_folder_are_refused(tmp_path):
    with pytest.raises(UsageError, match="directory .* does not exist"):
        paths.check_writable(str(tmp_path / "no" / "x.jsonl"), "output file", "choose another")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UsageError, match="can be written by others"):
        paths.own_directory(shared, "report folder", "choose another -o")
