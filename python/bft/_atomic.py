"""One way to replace a small file so that a crash leaves the old or the new one, never a torn one.

Slurm's own state save: write a temporary file beside it, fsync, rename over it (and, where the file
must survive a power cut too, fsync the directory). Used by checkpoints, the keeper's address file,
the Slurm source's secret and the local source's clock.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes, *, sync_directory: bool = False, mode: int = 0o600,
                     sync: bool = True) -> None:
    """Replaces `path` with `data`, with permissions `mode` whatever the umask (0600: its owner only);
    `sync`: on disk before the rename (not needed of a file rewritten every few seconds).

    The temporary file gets a fresh random name and is created exclusively without following a link
    (mkstemp: O_CREAT|O_EXCL|O_NOFOLLOW), so a link planted in the directory, at a temporary name or at
    `path` itself, is never written through: the rename replaces a link at `path`, it does not follow it.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if sync_directory:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
