"""Reading files in bounded memory: the small files the command line and the manager read whole (@
lists, curve files, the local source's clock file) and the tail of a log.

One line cap for every reader, C++ and Python (``bft::kMaxLineBytes``), and one size cap for every
file read whole, so that ``@/dev/zero``, a 300 MB line or a log of gigabytes costs at most these,
and an error that quotes a line quotes a short one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, List, Union

from ._core import MAX_LINE_BYTES

# A file read whole: 16 MiB. The largest such file is an @ list of a machine's node names: a million
# names of ten characters (sim.MAX_MACHINE_NODES) take 11 MiB.
MAX_FILE_BYTES = 16 << 20

# How much of a log a tail read takes at a time, from the end backwards.
TAIL_BLOCK_BYTES = 1 << 16

PathLike = Union[str, "os.PathLike[str]"]


def read_whole(path: PathLike, what: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a file of at most `max_bytes` (default MAX_FILE_BYTES) whose lines are at most
    MAX_LINE_BYTES long; otherwise (or if it cannot be read) a ValueError naming `what` and the file
    (and line)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise ValueError(f"{what}: cannot read {path}: {e.strerror or e}") from None
    if len(data) > max_bytes:
        size = f"{max_bytes >> 20} MiB" if max_bytes >= 1 << 20 else f"{max_bytes >> 10} KiB"
        raise ValueError(f"{what}: {path} is larger than {size}")
    # A line longer than the cap contains a multiple of the cap: look around each, never further
    # than the cap, so the check is one pass over the file however it looks.
    for boundary in range(MAX_LINE_BYTES, len(data), MAX_LINE_BYTES):
        reach = max(0, boundary - MAX_LINE_BYTES - 1)
        newline = data.rfind(b"\n", reach, boundary)
        if newline >= 0 or reach == 0:
            begin = newline + 1
            stop = min(len(data), begin + MAX_LINE_BYTES + 1)
            if data.find(b"\n", boundary, stop) >= 0 or stop - begin <= MAX_LINE_BYTES:
                continue
        line = data.count(b"\n", 0, boundary) + 1
        raise ValueError(f"{what}: {path}:{line}: a line longer than {MAX_LINE_BYTES} bytes")
    return data


def read_json(path: PathLike, what: str) -> Any:
    """A JSON document of a file read whole (read_whole); not JSON, or nested too deeply for Python's
    parser, is a ValueError naming `what` and the file."""
    data = read_whole(path, what)
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError(f"{what}: {path}: nested too deeply to be read") from None
    except ValueError as e:  # a JSONDecodeError or a UnicodeDecodeError
        raise ValueError(f"{what}: {path}: not JSON ({e})") from None


def tail_lines(path: PathLike, count: int) -> List[str]:
    """The last `count` lines of a text file (invalid UTF-8 replaced), read backwards from its end in
    blocks: memory and time grow with what is shown, not with the file. A line is cut to its last
    MAX_LINE_BYTES characters."""
    with open(path, "rb") as f:
        pos = f.seek(0, os.SEEK_END)
        data = b""
        # count + 1 newlines (the last line may end in one) or the start of the file.
        while pos > 0 and data.count(b"\n") <= count and len(data) <= (count + 1) * (MAX_LINE_BYTES + 1):
            step = min(TAIL_BLOCK_BYTES, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    if pos > 0:
        data = data[data.find(b"\n") + 1:]  # up to its first newline, a part of a line
    lines = data.decode("utf-8", "replace").splitlines()
    return [line[-MAX_LINE_BYTES:] for line in lines[-count:]] if count else []
