"""What the manager trusts (docs/security.md, "Addresses" and "Files"): no listener on a wildcard
address, however it is spelled and wherever it is given; a configuration file or state directory
only from the manager's own user, writable by nobody else, and no symbolic link followed; the job's secret
read on its node only from a file private to the user."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from bft import cli
from bft.runtime.cli import _private_dir as private_dir
from bft.runtime.cli_options import UsageError
from bft.runtime.sources.base import SourceError
from bft.runtime.sources.slurm import SlurmNodeSource
from bft.runtime.trust.addresses import check_listen_address
from bft.train import protocol
from runtime_util import bft, one_line_error

# Every way of writing "every address" that the kernel or the C library accepts for a bind.
WILDCARDS = ("0.0.0.0", "::", "0:0:0:0:0:0:0:0", "::ffff:0.0.0.0", "::ffff:0:0", "::%1", "0", "0x0", "0.0")
needs_tomllib = pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is in the standard library from 3.11")


def _refused_in_one_line(argv, capsys, *needles):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("address", WILDCARDS)
def test_a_wildcard_bind_is_refused_in_one_line_in_every_spelling(address, tmp_path, capsys):
    _refused_in_one_line(["manager", "--state-dir", str(tmp_path / "s"), "--bind", address], capsys,
                         "--bind", "wildcard")
    assert not (tmp_path / "s").exists()  # refused before anything was made


@pytest.mark.parametrize("address", WILDCARDS)
def test_a_wildcard_metrics_address_is_refused_in_one_line_in_every_spelling(address, tmp_path, capsys):
    _refused_in_one_line(["manager", "--state-dir", str(tmp_path / "s"), "--metrics-port", "0",
                          "--metrics-address", address], capsys, "--metrics-address", "wildcard")
    assert not (tmp_path / "s").exists()


@needs_tomllib
@pytest.mark.parametrize("address", WILDCARDS)
def test_a_wildcard_in_the_configuration_file_is_refused_naming_its_line(address, tmp_path, capsys):
    path = tmp_path / "manager.toml"
    path.write_text(f'policy = "exact"\nbind = "{address}"\nmetrics-address = "127.0.0.1"\n')
    _refused_in_one_line(["manager", "--state-dir", str(tmp_path / "s"), "--config", str(path)], capsys,
                         f"{path}:2: --bind", "wildcard")
    path.write_text(f'metrics-port = 0\nmetrics-address = "{address}"\n')
    _refused_in_one_line(["manager", "--state-dir", str(tmp_path / "s"), "--config", str(path)], capsys,
                         "--metrics-address", "wildcard")


@pytest.mark.parametrize("address", ["0.0.0.0", "0"])
def test_a_wildcard_the_source_derives_without_bind_is_refused_naming_it(address, tmp_path):
    """The Slurm source listens on the address its nodes reach the manager at, unless --bind: a
    --slurm-manager-address that is a wildcard is refused by the same check."""
    source = SlurmNodeSource("bft-test", tmp_path, manager_address=address)
    with pytest.raises(SourceError, match=f"the manager's address '{address}'.*wildcard.*give --bind"):
        source.listen_address()
    bound = SlurmNodeSource("bft-test", tmp_path, manager_address=address, bind="127.0.0.1")
    assert bound.listen_address() == "127.0.0.1"


def test_one_address_of_the_host_is_accepted_and_a_name_that_does_not_resolve_is_named():
    for address in ("127.0.0.1", "::1", "localhost", "10.1.2.3"):
        assert check_listen_address("--bind", address) == address
    with pytest.raises(ValueError, match=r"^--bind: '999\.1\.1\.1' is neither an IP address nor a name"):
        check_listen_address("--bind", "999.1.1.1")


# -- the configuration file ---------------------------------------------------------------------


@needs_tomllib
@pytest.mark.parametrize("mode, who", [(0o620, "group"), (0o602, "others"), (0o666, "group and others")])
def test_a_configuration_file_others_can_write_is_refused_naming_who(mode, who, tmp_path, capsys):
    path = tmp_path / "manager.toml"
    path.write_text('policy = "exact"\n')
    path.chmod(mode)
    _refused_in_one_line(["manager", "--state-dir", str(tmp_path / "s"), "--config", str(path)], capsys,
                         f"--config {path}: writable by {who}")
    assert not (tmp_path / "s").exists()


@needs_tomllib
def test_a_symlinked_configuration_file_is_not_followed(tmp_path, capsys):
    target = tmp_path / "real.toml"
    target.write_text('bind = "10.1.2.3"\n')
    link = tmp_path / "manager.toml"
    link.symlink_to(target)
    _refused_in_one_line(["manager", "--state-dir", str(tmp_path / "s"), "--config", str(link)], capsys,
                         f"--config {link}: a symbolic link")


@needs_tomllib
def test_a_configuration_that_is_no_regular_file_or_too_large_is_refused_without_reading_it(tmp_path, capsys):
    _refused_in_one_line(["manager", "--state-dir", str(tmp_path / "s"), "--config", "/dev/zero"], capsys,
                         "--config /dev/zero: not a regular file")
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo, 0o600)  # opening it for reading would wait for a writer
    _refused_in_one_line(["manager", "--state-dir", str(tmp_path / "s"), "--config", str(fifo)], capsys,
                         "not a regular file")
    big = tmp_path / "big.toml"
    big.write_text("# padding\n" * 200_000)
    _refused_in_one_line(["manager", "--state-dir", str(tmp_path / "s"), "--config", str(big)], capsys,
                         f"--config {big}: larger than")


@needs_tomllib
@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_configuration_file_of_another_user_is_refused(tmp_path, capsys):
    path = tmp_path / "manager.toml"
    path.write_text('bind = "10.1.2.3"\n')
    path.chmod(0o644)
    os.chown(path, 65534, 65534)  # nobody's
    _refused_in_one_line(["manager", "--state-dir", str(tmp_path / "s"), "--config", str(path)], capsys,
                         f"--config {path}: owned by another user (uid 65534)")


# -- the state directory --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o1777])
def test_a_state_directory_others_can_write_is_refused_and_left_as_it_is(mode, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(mode)
    (state / "state.db").write_bytes(b"planted")
    r = bft("manager", "--state-dir", str(state), "--local-nodes", "1")
    one_line_error(r, f"--state-dir {state}: writable by")
    assert stat.S_IMODE(state.stat().st_mode) == mode  # not repaired: whatever was planted stays untrusted
    assert (state / "state.db").read_bytes() == b"planted"


def test_a_state_directory_others_can_only_read_is_closed_and_one_they_can_write_is_not(tmp_path):
    readable, writable = tmp_path / "readable", tmp_path / "writable"
    for d, mode in ((readable, 0o755), (writable, 0o775)):
        d.mkdir()
        d.chmod(mode)
    private_dir(readable)
    assert stat.S_IMODE(readable.stat().st_mode) == 0o700
    with pytest.raises(UsageError, match=f"^--state-dir {writable}: writable by group "):
        private_dir(writable)
    assert stat.S_IMODE(writable.stat().st_mode) == 0o775


def test_a_symlink_in_the_state_directory_is_refused_naming_it(tmp_path):
    state = tmp_path / "state"
    (state / "jobs" / "j1").mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    victim = tmp_path / "victim"
    victim.write_text("another file\n")
    (state / "jobs" / "j1" / "output.log").symlink_to(victim)
    r = bft("manager", "--state-dir", str(state), "--local-nodes", "1")
    one_line_error(r, f"--state-dir {state}: jobs/j1/output.log is a symbolic link")
    assert victim.read_text() == "another file\n"


# -- the job's secret, read on the node ----------------------------------------------------------

def test_a_secret_file_that_is_a_link_shared_or_malformed_is_refused_naming_it(tmp_path):
    real = tmp_path / "real"
    real.write_text("ab" * 32)
    real.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(real)
    shared = tmp_path / "shared"
    shared.write_text("ab" * 32)
    shared.chmod(0o640)
    short = tmp_path / "short"
    short.write_text("abcd")
    short.chmod(0o600)
    for path, why in ((link, "Too many levels of symbolic links"), (shared, "private to it"),
                      (short, "not a job secret"), (tmp_path / "missing", "No such file")):
        with pytest.raises(ValueError, match=f"^BFT_JOB_SECRET_FILE {path}: .*{why}"):
            protocol.resolve_job_secret({"BFT_JOB_SECRET_FILE": str(path)})
    environ = {"BFT_JOB_SECRET_FILE": str(real)}
    protocol.resolve_job_secret(environ)
    assert environ["BFT_JOB_SECRET"] == "ab" * 32
