"""Several machines that share no disk, on one host: each process in a mount namespace of its own.

A process started with `own_machine` sees an empty /tmp, except its own folders and Sluice's installation (this
checkout and its virtualenv) where those are under /tmp, and an empty folder in place of each of the other machines'
folders. What it writes there, no other machine sees. Network and process ids stay shared, as between machines on
one network. Linux only, as root (`unshare`); used by the tests of a share-nothing cluster.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import sluice

__all__ = ["own_machine"]

_TMP = Path("/tmp")


def own_machine(command: Sequence[str], *, own: Sequence[Path], others: Sequence[Path] = ()) -> list[str]:
    """`command` on a machine of its own (see the module's docstring). Folders may nest either way: an `own` folder
    inside one of the `others` stays visible, as does an `other` inside the installation stay hidden. `unshare`
    replaces itself with the command, so the process id is the command's."""
    kept = sorted({p.resolve() for p in (*own, Path(sluice.__file__).parents[1], Path(sys.prefix))})
    hidden = sorted({_TMP, *(p.resolve() for p in others)} - set(kept))
    for folder in (*own, *others):
        folder.mkdir(parents=True, exist_ok=True)
    # each kept folder waits in a stash while the folders around it are covered, then moves back in place; from the
    # outermost folder in, so that what covers a folder is mounted after what it sits in
    steps = ["set -e", "stash=$(mktemp -d /dev/shm/sluice-machine.XXXXXX)"]
    steps += [f'mkdir "$stash/{i}" && mount --rbind {_quoted(p)} "$stash/{i}"' for i, p in enumerate(kept)]
    for path in sorted((*kept, *hidden), key=lambda p: len(p.parts)):
        steps.append(f"mkdir -p {_quoted(path)} && " + (f'mount --move "$stash/{kept.index(path)}" {_quoted(path)}'
                                                        if path in kept else f"mount -t tmpfs tmpfs {_quoted(path)}"))
    steps.append('rm -rf "$stash"')
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", "; ".join(steps) + '; exec "$@"', "sh",
            *command]


def _quoted(path: Path) -> str:
    return shlex.quote(str(path))
