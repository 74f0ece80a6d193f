"""Crash-safe checkpoint files: write ``<path>.tmp`` beside the target, fsync, then rename it over.

A run killed while a checkpoint is being written (SIGKILL, OOM killer, preemption, power loss)
must leave the previous checkpoint loadable, so that ``--ckpt_path last`` resumes from the last
complete iteration. Lightning's default writer serialises the whole checkpoint into memory and
hands it to fsspec, whose local "transaction" stages it in the system temp folder: a second
in-memory copy of a checkpoint that holds the optimizer state, and, when the temp folder is on
another filesystem than the checkpoints (the usual cluster setup), a final copy that rewrites the
target in place, without fsync. This writer streams ``torch.save`` into a temp file in the target's
own folder, so the final ``os.replace`` is one atomic rename on the same filesystem.

The configs keep one checkpoint, named ``last.ckpt`` (``ModelCheckpoint(filename="last",
save_top_k=1, enable_version_counter=False)``), replaced here each iteration: one write per
iteration, and ``--ckpt_path last`` finds it. ``save_last="link"`` is not crash-safe: Lightning
deletes the previous top-k file before it re-points the link, and re-points it with
remove-then-create, so a kill in between leaves no valid ``last.ckpt`` and the "resumed" run starts
from scratch. ``save_last=True`` is safe with this writer but writes every checkpoint twice.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch.plugins.io import TorchCheckpointIO

TMP_SUFFIX = ".tmp"
#: ``--ckpt_path`` values that are not files: Lightning looks the checkpoint up itself.
NAMED = ("last", "best", "hpc", "registry")
_FIX = "point --ckpt_path at a .ckpt this project wrote (<checkpoint dirpath>/last.ckpt), or resume with --ckpt_path last"


def check_checkpoint(ckpt_path: Any) -> None:
    """One ``ValueError`` (the path, what is wrong, what to do) for a ``--ckpt_path`` that names a
    local file which is absent or not a checkpoint torch's restricted unpickler reads. The check
    maps the file (``mmap``): it unpickles the whole structure but reads no tensor data."""
    if ckpt_path is None or str(ckpt_path) in NAMED or str(ckpt_path).startswith("registry:") \
            or not _is_local_file_protocol(str(ckpt_path)):
        return
    path = Path(str(ckpt_path)).expanduser()
    if not path.is_file():
        what = "is a folder, not a checkpoint file" if path.is_dir() else "no such file"
        raise ValueError(f"--ckpt_path={str(ckpt_path)!r}: {what}; {_FIX}")
    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as exc:  # torch's weights-only refusal: an object that would run code
        found = re.search(r"(Unsupported global: GLOBAL [\w.]+|Unsupported operand \d+)", str(exc))
        raise ValueError(f"--ckpt_path={str(ckpt_path)!r} holds more than tensors and plain containers "
                         f"({found.group(1) if found else 'an object torch refuses'}), which the restricted "
                         f"unpickler this project loads checkpoints with refuses; {_FIX}") from None
    except (RuntimeError, EOFError, OSError, ValueError, IndexError, KeyError) as exc:
        zipped = path.read_bytes()[:4] == b"PK\x03\x04"
        what = "is not a complete checkpoint (truncated or corrupt: a torch archive without its end)" if zipped \
            else "is not a checkpoint (not a torch.save file)"
        raise ValueError(f"--ckpt_path={str(ckpt_path)!r} {what}: {type(exc).__name__}; {_FIX}") from None


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (POSIX: a directory entry is data of the directory)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some filesystems / platforms cannot open a directory; the rename still happened
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local writes are write-then-rename (remote URLs: Lightning's writer,
    object stores replace whole objects anyway). Loading and removal are Lightning's."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or not _is_local_file_protocol(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + TMP_SUFFIX)
        try:
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            # Replaces a symlink at ``target`` (left by an earlier save_last="link" run) itself,
            # never the file it points to.
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a failed write (disk full, ...) leaves no stray temp file
            raise
        _fsync_dir(target.parent)
