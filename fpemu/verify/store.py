"""A resumable results folder: a manifest and an append-only JSON-lines file of finished chunks.

One line per finished chunk, written with a single ``write`` on an ``O_APPEND`` descriptor and
``fsync``-ed before the next chunk is recorded. On opening, a torn last line (a crash in the
middle of a write) is cut off, so that chunk is simply run again; a chunk index found twice is
counted once (only the driver process writes, so it does not happen in practice). A lock file
keeps two runs from writing the same folder at once.

>>> import tempfile
>>> from fpemu.verify.report import ChunkResult
>>> with tempfile.TemporaryDirectory() as d:
...     with ResultStore(d, campaign="demo", chunks=4, size=100) as s:
...         s.record(ChunkResult(2, 50, 75, {}))
...     sorted(ResultStore(d, campaign="demo", chunks=4, size=100).done())
[2]
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType
from typing import Any

from fpemu.verify.report import ChunkResult

MANIFEST = "manifest.json"
CHUNKS = "chunks.jsonl"
LOCK = "lock"


class ResultStore:
    """The results folder of one campaign cut into ``chunks`` chunks."""

    def __init__(
        self, folder: str | os.PathLike[str], *, campaign: str, chunks: int, size: int
    ) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.chunks = chunks
        self.manifest: dict[str, object] = {
            "campaign": campaign,
            "chunks": chunks,
            "cases": size,
            "version": 1,
        }
        path = self.folder / MANIFEST
        if path.exists():
            old = json.loads(path.read_text(encoding="utf-8"))
            if {k: old.get(k) for k in self.manifest} != self.manifest:
                raise ValueError(
                    f"results={str(self.folder)!r} holds campaign {old.get('campaign')!r} in "
                    f"{old.get('chunks')} chunks; this run is {campaign!r} in {chunks} chunks "
                    "(use another folder, or the same --chunks)"
                )
        else:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.manifest, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, path)  # atomic: a manifest is whole or absent
        self._lock_fd: int | None = None
        self._repair()

    @property
    def path(self) -> Path:
        """The JSON-lines file of finished chunks."""
        return self.folder / CHUNKS

    def _repair(self) -> None:
        """Cut a torn last line (no newline: the write was interrupted)."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(self.path, "r+b") as fh:
                fh.truncate(data.rfind(b"\n") + 1)

    def done(self) -> dict[int, ChunkResult]:
        """Finished chunks by index (each once; lines that do not parse are ignored)."""
        out: dict[int, ChunkResult] = {}
        if not self.path.exists():
            return out
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                r = ChunkResult.from_json(line)
            except (ValueError, KeyError, TypeError):
                continue
            if 0 <= r.index < self.chunks:
                out.setdefault(r.index, r)
        return out

    def record(self, result: ChunkResult) -> None:
        """Append one finished chunk durably (one write, then fsync)."""
        data = (result.to_json() + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def __enter__(self) -> ResultStore:
        try:
            import fcntl  # noqa: PLC0415 - POSIX only
        except ImportError:  # pragma: no cover - not POSIX: no locking
            return self
        fd = os.open(self.folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise RuntimeError(f"results={str(self.folder)!r} is in use by another run") from None
        self._lock_fd = fd
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> Any:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None
        return None
