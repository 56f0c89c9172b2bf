"""One way to replace a small file so that a crash leaves the old or the new one, never a torn one.

Slurm's own state save: write a temporary file beside it, fsync, rename over it (and, where the file
must survive a power cut too, fsync the directory). Used by checkpoints, the keeper's address file,
the Slurm source's secret and the local source's clock.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, data: bytes, *, sync_directory: bool = False) -> None:
    """Replaces `path` with `data`, readable by its owner only (0600, whatever the umask)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync_directory:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
