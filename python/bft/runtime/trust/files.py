"""What the manager trusts of the file system (docs/security.md, "Files"): a file or directory only
from its own user, never one that another user can write, and never through a symbolic link, which
whoever can write the directory holding it could have planted. Each check raises ValueError with
one line saying why; the callers prefix the file's flag."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def _writers(mode: int) -> str:
    """Who besides the owner may write, by the mode's bits ("" if nobody)."""
    who = [name for name, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if mode & bit]
    return " and ".join(who)


def check_owned(st: os.stat_result, what: str = "") -> None:
    """`st` (of a file or directory) belongs to this process's user and nobody else may write it."""
    if st.st_uid != os.getuid():
        raise ValueError(f"{what}owned by another user (uid {st.st_uid}); only this user's own files are trusted")
    writers = _writers(st.st_mode)
    if writers:
        raise ValueError(f"{what}writable by {writers} (mode {stat.S_IMODE(st.st_mode):04o}); "
                         "anyone who can write it can steer the manager: chmod go-w it")


def read_owned_file(path: Path, max_bytes: int) -> bytes:
    """The content of `path`, a regular file of this user that nobody else can write, opened without
    following a symbolic link (the checks are made on the open file, so it cannot be swapped between
    the check and the read); at most `max_bytes`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ValueError("a symbolic link; give the file itself (links are not followed)") from None
        raise ValueError(e.strerror or str(e)) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        check_owned(st)
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes} bytes")
    return data


def check_private_dir(path: Path) -> None:
    """`path`, a directory of this user that nobody else can write, holds no symbolic link at any
    depth (whatever one points at, the manager would open it as its own file)."""
    st = path.stat()
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError("not a directory")
    check_owned(st)
    for parent, dirs, files in os.walk(path):  # does not descend into linked directories
        for name in (*dirs, *files):
            if os.path.islink(os.path.join(parent, name)):
                link = os.path.relpath(os.path.join(parent, name), path)
                raise ValueError(f"{link} is a symbolic link; the manager follows none in its directory: remove it")
