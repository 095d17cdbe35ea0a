"""The run token's file under srun without PMIx (core/run/token.py): trusted only from a directory of
this user's own and a file of theirs, never through a link; a shared or foreign directory is refused,
never chmodded; a dead run's leftover file goes with the next run."""

from __future__ import annotations

import os
import time

import pytest

from commbench.core.errors import UsageError
from commbench.core.run import token as run_token

TOKEN = "0123456789abcdef" * 2


def test_published_and_fetched_in_a_private_directory(tmp_path):
    path = tmp_path / "tokens" / "slurm-7.0.token"
    run_token.publish(path, TOKEN, 4242)
    assert (path.parent.stat().st_mode & 0o777, path.stat().st_mode & 0o777) == (0o700, 0o600)
    assert run_token.fetch(path, 1, 1, "h1", started=time.time()) == (TOKEN, 4242)


def test_a_shared_directory_is_refused_and_left_as_it_was(tmp_path):
    shared = tmp_path / "scratch"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(UsageError, match=r"is open to other users \(mode 1777\)"):
        run_token.publish(shared / "slurm-7.0.token", TOKEN, 4242)
    assert shared.stat().st_mode & 0o7777 == 0o1777 and not (shared / "slurm-7.0.token").exists()
    (shared / "slurm-7.0.token").write_text(f"{'f' * 32} 4243\n")  # planted by whoever can write there
    with pytest.raises(UsageError, match="open to other users"):
        run_token.fetch(shared / "slurm-7.0.token", 1, 1, "h1", started=time.time())


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's directory needs root")
def test_another_users_directory_is_refused_even_for_root(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    (theirs / "slurm-7.0.token").write_text(f"{'f' * 32} 4243\n")
    os.chown(theirs, 65534, 65534)
    with pytest.raises(UsageError, match="belongs to uid 65534"):
        run_token.fetch(theirs / "slurm-7.0.token", 1, 1, "h1", started=time.time())
    with pytest.raises(UsageError, match="belongs to uid 65534"):
        run_token.publish(theirs / "slurm-8.0.token", TOKEN, 4242)
    assert theirs.stat().st_mode & 0o777 == 0o700 and theirs.stat().st_uid == 65534


def test_a_link_is_never_followed(tmp_path):
    mine = tmp_path / "tokens"
    mine.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere.token"
    elsewhere.write_text(f"{'f' * 32} 4243\n")
    elsewhere.chmod(0o600)
    (mine / "slurm-7.0.token").symlink_to(elsewhere)
    assert run_token._read(mine / "slurm-7.0.token", 0) is None
    (tmp_path / "linked").symlink_to(mine, target_is_directory=True)
    with pytest.raises(UsageError, match="symbolic link"):
        run_token.publish(tmp_path / "linked" / "slurm-7.0.token", TOKEN, 4242)


def test_a_dead_runs_leftover_goes_with_the_next_run(tmp_path):
    d = tmp_path / "tokens"
    d.mkdir(mode=0o700)
    dead, live = d / "slurm-5.0.token", d / "slurm-6.0.token"
    for f in (dead, live):
        f.write_text(f"{TOKEN} 1\n")
    old = time.time() - run_token.LEFTOVER - 10
    os.utime(dead, (old, old))
    run_token.publish(d / "slurm-7.0.token", TOKEN, 4242)
    assert not dead.exists() and live.exists()


def test_an_exported_token_gives_each_step_its_own_token_and_a_port_only_it_can_work_out():
    """With COMMBENCH_TOKEN exported (an sbatch script's, used by many steps): each step proves a token of
    its own and listens on a port made from it, not from the job's public ids; every rank agrees."""
    from commbench.core.run.placement import PORT_BASE, PORT_SPAN, detect

    def placement(rank, step, token=TOKEN, job=4242):
        return detect({"SLURM_PROCID": str(rank), "SLURM_JOB_ID": str(job), "SLURM_STEP_ID": str(step),
                       "SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "localhost", "COMMBENCH_TOKEN": token})

    a, b, other_step, other_token = placement(0, 0), placement(1, 0), placement(0, 1), placement(0, 0, "f" * 32)
    assert (a.token, a.root_port) == (b.token, b.root_port)  # the step's ranks meet
    assert a.token not in (TOKEN, other_step.token) and other_step.root_port != a.root_port
    assert a.root_port != PORT_BASE + (4242 * 17 + 0) % PORT_SPAN  # the old derivation from public ids
    assert other_token.root_port != a.root_port  # the port depends on the secret: a stranger cannot predict it
    ports = {placement(0, 0, job=j).root_port for j in range(200)}
    assert len(ports) > 190 and all(PORT_BASE <= p < PORT_BASE + PORT_SPAN for p in ports)
