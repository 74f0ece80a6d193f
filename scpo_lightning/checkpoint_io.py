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
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch.plugins.io import TorchCheckpointIO

TMP_SUFFIX = ".tmp"


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
