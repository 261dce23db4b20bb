"""Lines of a text file, as Druid's `FastLineIterator` reads them: split at `\\n`, a `\\r` before it dropped, a
last line without `\\n` kept, no line after a final `\\n`. Lines are counted from 1, header lines included.

Files are read in blocks that end at a line break, and a block is split into an Arrow binary array of lines
without a Python object per line (numpy finds the line breaks, Arrow slices)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

BLOCK_BYTES = 8 << 20
_LF = 10
_CR = 13


@dataclass(frozen=True)
class Block:
    """Whole lines of a file: `data` ends with a line break unless it is the file's end."""

    data: bytes
    #: the line number of the block's first line
    first_line: int
    #: how many lines the block holds
    line_count: int


class LineReader:
    """Reads a file's lines one at a time (headers) and then the rest block by block."""

    def __init__(self, stream: BinaryIO, block_bytes: int = BLOCK_BYTES) -> None:
        self._stream = stream
        self._block_bytes = block_bytes
        self._pending = b""
        self._eof = False
        #: lines handed out so far
        self.lines_read = 0

    def next_line(self) -> bytes | None:
        """The next line without its line break, or None at the end of the file."""
        while b"\n" not in self._pending and not self._eof:
            self._fill()
        if not self._pending:
            return None
        line, sep, rest = self._pending.partition(b"\n")
        self._pending = rest
        self.lines_read += 1
        return line[:-1] if sep and line.endswith(b"\r") else line

    def blocks(self) -> Iterator[Block]:
        """The rest of the file in blocks of whole lines (a line longer than a block makes a longer block)."""
        while True:
            chunk = b"" if self._eof else self._stream.read(self._block_bytes)
            self._eof = self._eof or not chunk
            data = self._pending + chunk if self._pending else chunk
            if not data:
                return
            cut = len(data) if self._eof else data.rfind(b"\n") + 1
            if cut == 0:  # no line ends yet: read on
                self._pending = data
                continue
            block, self._pending = (data, b"") if cut == len(data) else (data[:cut], data[cut:])
            count = block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
            yield Block(block, self.lines_read + 1, count)
            self.lines_read += count

    def _fill(self) -> None:
        chunk = self._stream.read(self._block_bytes)
        if not chunk:
            self._eof = True
        else:
            self._pending += chunk


def line_bounds(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where each line of a (non-empty) block starts and ends, its `\n` excluded."""
    raw = np.frombuffer(data, dtype=np.uint8)
    breaks = np.flatnonzero(raw == _LF)
    ends = breaks if data[-1] == _LF else np.append(breaks, len(data))
    starts = np.empty(len(ends), dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    return starts, ends


def split_lines(data: bytes) -> pa.Array:
    """The lines of a block as a binary array, without their `\n` or `\r\n`."""
    if not data:
        return pa.array([], pa.binary())
    starts, ends = line_bounds(data)
    # each line with its terminator: contiguous, so plain offsets describe them
    offsets = np.append(starts, len(data)).astype(np.int32 if len(data) < 2**31 else np.int64)
    kind = pa.binary() if offsets.dtype == np.int32 else pa.large_binary()
    whole = pa.Array.from_buffers(kind, len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    lengths = ends - starts
    if b"\r" in data:
        raw = np.frombuffer(data, dtype=np.uint8)
        lengths = lengths - ((lengths > 0) & (raw[np.maximum(ends - 1, 0)] == _CR) & (ends < len(data)))
    return _truncate(whole, lengths).cast(pa.binary())


def _truncate(lines: pa.Array, lengths: np.ndarray) -> pa.Array:
    """Each line cut to its length (dropping the terminator): one copy of the data, done by Arrow."""
    full = pc.binary_length(lines).to_numpy()
    if np.array_equal(full, lengths):
        return lines
    cut = full - lengths
    if cut.min() == cut.max():
        return pc.binary_slice(lines, 0, -int(cut[0])) if cut[0] else lines
    # terminators of one or two bytes (\n, \r\n) and a last line with none
    out = pc.binary_slice(lines, 0, -1)
    two = cut == 2
    if two.any():
        out = pc.if_else(pa.array(two), pc.binary_slice(lines, 0, -2), out)
    none = cut == 0
    if none.any():
        out = pc.if_else(pa.array(none), lines, out)
    return out


def text_lines(data: bytes) -> list[str]:
    """The lines of a block as Python strings (the per-line paths), malformed UTF-8 replaced as Java does."""
    if not data:
        return []
    lines = data.split(b"\n")
    terminated = len(lines) - 1  # the part after the last \n has none
    if data.endswith(b"\n"):
        lines.pop()
    return [(line[:-1] if i < terminated and line.endswith(b"\r") else line).decode("utf-8", errors="replace")
            for i, line in enumerate(lines)]
