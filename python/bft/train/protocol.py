"""What passes between the manager and a training process: the environment a worker is started
with, and the progress report, one UDP datagram. The sender (bft.train) and the receiver (the
manager, bft.runtime) both use this module, so the two cannot disagree::

    BFT1 <job> <generation> <round> <seq> <rank> <world> <all_ranks 0|1> <samples> <time_s> <state_bytes> <hmac>

``hmac`` is HMAC-SHA256 (hex) of everything before it, keyed with the job's secret, which nobody
else sees: the manager leaves it in a 0600 file of the job's directory (on a cluster, the shared
state directory) and starts the job with the file's path (BFT_JOB_SECRET_FILE), never the secret,
which would cross the network in the clear in Slurm's launch messages or a standby's assignment; the
node's first process of the job reads it there (:func:`resolve_job_secret`) into BFT_JOB_SECRET of
its own environment, which its children inherit. ``generation``
counts the manager's launches of the job, ``round`` torchrun's restarts of its workers within one
launch (TORCHELASTIC_RESTART_COUNT), and ``seq`` the datagrams of one worker process: so a
replayed or stale datagram is recognised and dropped. ``state_bytes`` is the size of the state a
resize moves (``bt.ElasticState.state_bytes``; 0 when the script does not say): the manager's rescale
costs before it has measured the job's own grow with it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from dataclasses import dataclass
from typing import Optional, Tuple

# The environment of every worker the manager starts (docs/runtime.md lists them with their meaning).
ENV_MANAGER_ID = "BFT_MANAGER_ID"  # the manager's identity: tags every process it started
ENV_JOB_ID = "BFT_JOB_ID"
ENV_NODE = "BFT_NODE"
ENV_GENERATION = "BFT_GENERATION"  # the manager's launch count of the job
ENV_REPORT_ADDR = "BFT_REPORT_ADDR"  # host:port of the report receiver
ENV_JOB_SECRET = "BFT_JOB_SECRET"  # hex key of the reports' HMAC (set on the node: resolve_job_secret)
ENV_JOB_SECRET_FILE = "BFT_JOB_SECRET_FILE"  # where the node reads it: what the manager's launch carries
ENV_CHECKPOINT_DIR = "BFT_CHECKPOINT_DIR"
ENV_GRACE_S = "BFT_GRACE_S"  # seconds between SIGTERM and SIGKILL
# The defaults of both sides (bft manager --grace, --inplace-timeout; a worker without the variable).
DEFAULT_GRACE_S = 20.0
DEFAULT_INPLACE_TIMEOUT_S = 30.0
ENV_TARGET_SAMPLES = "BFT_TARGET_SAMPLES"  # the job's work, if the user gave one
ENV_CONFIGURATION = "BFT_CONFIGURATION"  # the configuration to run in (bft.jobs.FULL_CONFIGURATION or a declared name)
ENV_REPORT_INTERVAL_S = "BFT_REPORT_INTERVAL_S"  # optional: seconds between a worker's progress reports
# Without BFT_REPORT_INTERVAL_S, a worker reports every DEFAULT_REPORT_INTERVAL_S; a shorter value
# than MIN_REPORT_INTERVAL_S is taken as that (the manager reads the first to know how often to expect one).
DEFAULT_REPORT_INTERVAL_S = 0.5
MIN_REPORT_INTERVAL_S = 0.05
# The job's processes on each node (bft manager/submit --procs-per-node): each in-place worker's
# LOCAL_RANK/LOCAL_WORLD_SIZE, torchrun's --nproc-per-node; a node source may bind devices by it.
ENV_PROCS_PER_NODE = "BFT_PROCS_PER_NODE"
ENV_EXIT_FILE = "BFT_AGENT_EXIT_FILE"  # where a process the manager started leaves its exit status
# In-place resizes (--resize inplace): the workers' rendezvous store, and how long a resize may take.
ENV_RESIZE = "BFT_RESIZE"  # the manager's resize method
# ENV_RESIZE's value for a worker resized in place (the runtime's ResizeMethod.INPLACE): it keeps its
# process across generations and joins each configuration in the keeper's store.
RESIZE_INPLACE = "inplace"
ENV_STORE_ADDR = "BFT_STORE_ADDR"  # host:port of the job's rendezvous store (the keeper's)
ENV_INPLACE_TIMEOUT_S = "BFT_INPLACE_TIMEOUT_S"  # a peer missing this long fails the resize
ENV_DIST_BACKEND = "BFT_DIST_BACKEND"  # "gloo" or "nccl": the workers' backend, if not the device's default
ENV_NODE_ADDR = "BFT_NODE_ADDR"  # the address other nodes reach this one at (gloo binds its interface)
# An in-place newcomer's ticket (its process row): it announces itself with it, and joins a generation
# only once the manager has published one that holds its node (bft.train.inplace).
ENV_JOIN_TICKET = "BFT_JOIN_TICKET"
# A warm standby (bft.train.standby) carries it from its start: a worker born of one has no job tag
# (its environment in /proc is the standby's), so it is known by its pid and the manager and node tags.
ENV_STANDBY = "BFT_STANDBY"

SECRET_HEX = 64  # a job's secret: 32 bytes, in hex


def resolve_job_secret(environ=os.environ) -> None:
    """Sets BFT_JOB_SECRET in `environ` from the file BFT_JOB_SECRET_FILE names, unless it is set. The
    file must be a regular file of this user that nobody else can read or write, reached without a
    symbolic link. ValueError, one line naming the file, if it cannot be used."""
    path = environ.get(ENV_JOB_SECRET_FILE)
    if environ.get(ENV_JOB_SECRET) or not path:
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ValueError(f"{ENV_JOB_SECRET_FILE} {path}: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise ValueError(f"{ENV_JOB_SECRET_FILE} {path}: not a regular file of this user, private to it "
                             f"(mode {stat.S_IMODE(st.st_mode):04o}, uid {st.st_uid})")
        text = f.read(SECRET_HEX + 1).decode("ascii", "replace").strip()
    try:
        if len(text) != SECRET_HEX:
            raise ValueError
        bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"{ENV_JOB_SECRET_FILE} {path}: not a job secret ({SECRET_HEX} hex digits)") from None
    environ[ENV_JOB_SECRET] = text


MAGIC = "BFT1"
MAX_SAMPLES = 1e18  # the most samples a job's work (bft submit --samples) or a report's count may say
MAX_DATAGRAM = 512
_FIELDS = 12


@dataclass(frozen=True)
class Report:
    job: str
    generation: int
    round: int
    seq: int
    rank: int
    world: int
    all_ranks: bool
    samples: float
    time_s: float
    state_bytes: int = 0


class BadSignature(ValueError):
    """A datagram whose HMAC does not match the job's secret: forged, tampered or of another job."""


def _mac(secret: bytes, body: bytes) -> str:
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def encode(report: Report, secret: bytes) -> bytes:
    body = (f"{MAGIC} {report.job} {report.generation} {report.round} {report.seq} {report.rank} {report.world} "
            f"{1 if report.all_ranks else 0} {report.samples!r} {report.time_s!r} {report.state_bytes}").encode()
    return body + b" " + _mac(secret, body).encode()


def peek_job(datagram: bytes) -> Optional[str]:
    """The job id a datagram claims to come from (unauthenticated), or None if it is not ours."""
    parts = datagram.split(b" ", 2)
    if len(parts) < 3 or parts[0] != MAGIC.encode():
        return None
    try:
        return parts[1].decode("ascii")
    except UnicodeDecodeError:
        return None


def decode(datagram: bytes, secret: bytes) -> Report:
    """Parses and authenticates one datagram. Raises ValueError saying what is wrong."""
    if len(datagram) > MAX_DATAGRAM:
        raise ValueError(f"datagram of {len(datagram)} bytes (at most {MAX_DATAGRAM})")
    body, _, mac = datagram.rpartition(b" ")
    if not hmac.compare_digest(_mac(secret, body).encode(), mac):
        raise BadSignature("bad signature")
    try:
        parts = body.decode("ascii").split(" ")
    except UnicodeDecodeError:
        raise ValueError("not ASCII") from None
    if len(parts) != _FIELDS - 1 or parts[0] != MAGIC:
        raise ValueError(f"expected {_FIELDS} fields starting with {MAGIC}")
    try:
        r = Report(parts[1], int(parts[2]), int(parts[3]), int(parts[4]), int(parts[5]), int(parts[6]),
                   parts[7] == "1", float(parts[8]), float(parts[9]), int(parts[10]))
    except ValueError as e:
        raise ValueError(f"bad field: {e}") from None
    if not (r.samples >= 0 and r.samples < MAX_SAMPLES and 0 <= r.rank < r.world <= 1_000_000 and r.time_s > 0
            and r.time_s < 1e11 and 0 <= r.state_bytes < 10**15):
        raise ValueError("a field is out of range")
    return r


# The rendezvous store's keys of an in-place job: the current generation, each generation's
# configuration (its member nodes in rank order), its members' arrivals, its own prefix for its
# process group, and the newcomers' announcements (before any generation holds them).
def generation_key(job: str) -> str:
    return f"bft/{job}/generation"


def config_key(job: str, generation: int) -> str:
    return f"bft/{job}/g{generation}/config"


def arrived_key(job: str, generation: int, node: str, local_rank: int = 0) -> str:
    """Set by local rank `local_rank` of `node` once it has come to the generation's rendezvous."""
    return f"bft/{job}/g{generation}/arrived/{node}/{local_rank}"


def newcomer_key(job: str, node: str, local_rank: int = 0) -> str:
    """Set by local rank `local_rank` of an in-place newcomer on `node` to its ticket (ENV_JOIN_TICKET)
    once it has started and connected: the manager then publishes the switch."""
    return f"bft/{job}/newcomer/{node}/{local_rank}"


def beat_key(job: str, node: str, local_rank: int = 0) -> str:
    """The heartbeat of local rank `local_rank` of an in-place job's `node`: "<beats> <steps> <waiting>"
    (bft.train.store_link.Heartbeat)."""
    return f"bft/{job}/beat/{node}/{local_rank}"


def group_prefix(job: str, generation: int) -> str:
    return f"bft/{job}/g{generation}/group/"


def parse_address(spec: str) -> Tuple[str, int]:
    """host:port (IPv6 hosts in brackets) as a (host, port) pair."""
    host, _, port = spec.rpartition(":")
    return host.strip("[]"), int(port)
