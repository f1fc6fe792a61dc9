"""What a spawned vLLM server leaves in ``/dev/shm``, and removing it.

vLLM's engine processes talk through POSIX shared-memory segments (``/dev/shm/psm_*``, hundreds of MB each on a
busy server). A server that shuts down cleanly unlinks them; one killed (SIGKILL after the stop grace, a crash, the
OOM killer) leaves them behind, holding memory until reboot. :class:`ShmWatch` remembers ``/dev/shm`` before the
server starts; after it has stopped, every shared-memory *file* with one of :data:`LEFTOVER_PREFIXES` that appeared
since and that no live process has open or mapped is removed, so entries of other programs (other servers still
running, another run's weight folders) are never touched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Set, Tuple

SHM = Path("/dev/shm")
#: Names of the segments vLLM's processes create (Python's ``multiprocessing.shared_memory``, torch, semaphores).
LEFTOVER_PREFIXES = ("psm_", "torch_", "sem.")


def shm_entries(root: Path = SHM) -> Set[str]:
    """Names in ``root`` (empty when it does not exist)."""
    try:
        return set(os.listdir(root))
    except OSError:
        return set()


def _identity(path: str) -> Optional[Tuple[int, int]]:
    """``(device, inode)`` of ``path`` (``None`` when it is gone)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _mapped(pid: str) -> Iterator[Tuple[int, int]]:
    """``(device, inode)`` of every file ``pid`` has mapped (``/proc/<pid>/maps``: ``address perms offset
    major:minor inode path``)."""
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) >= 5 and fields[4] != "0":
                major, _, minor = fields[3].partition(":")
                yield os.makedev(int(major, 16), int(minor, 16)), int(fields[4])


def _opened(pid: str) -> Iterator[Tuple[int, int]]:
    """``(device, inode)`` of every file ``pid`` has open (``/proc/<pid>/fd``)."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        found = _identity(f"/proc/{pid}/fd/{fd}")
        if found is not None:
            yield found


def in_use(paths: Iterable[Path]) -> Set[Path]:
    """The ``paths`` some live process has open (``/proc/<pid>/fd``) or mapped (``/proc/<pid>/maps``); processes
    this user may not inspect are skipped.

    Files are matched by device and inode, not by name: a POSIX semaphore (``sem.*``, e.g. Python's
    ``multiprocessing`` locks, which vLLM's engine and workers share) is created under a temporary name, mapped,
    then linked to its real name, so ``/proc/<pid>/maps`` shows ``/dev/shm/sem.XXXXXX (deleted)`` for a semaphore in
    use. Matched by name, a semaphore of another server still starting looked unused and was removed, and that
    server's worker died with ``FileNotFoundError`` in ``SemLock._rebuild`` (issue 28.9).
    """
    wanted: Dict[Tuple[int, int], Path] = {}
    for path in paths:
        found = _identity(str(path))
        if found is not None:
            wanted[found] = Path(path)
    found_in_use: Set[Path] = set()
    if not wanted:
        return found_in_use
    for pid in (d for d in os.listdir("/proc") if d.isdigit()):
        for reader in (_mapped, _opened):
            try:
                found_in_use.update(wanted[key] for key in reader(pid) if key in wanted)
            except (OSError, ValueError):
                continue
    return found_in_use


class ShmWatch:
    """Entries of ``root`` that appear while something (a spawned server) runs.

    Args:
        root: the shared-memory folder (``/dev/shm``).
    """

    def __init__(self, root: Path = SHM):
        self.root = root
        self.before = shm_entries(root)

    def new_entries(self) -> List[Path]:
        """Entries that were not there when the watch started."""
        return sorted(self.root / name for name in shm_entries(self.root) - self.before)

    def remove_leftovers(self) -> List[Path]:
        """Remove the new shared-memory files (:data:`LEFTOVER_PREFIXES`) no live process has open or mapped;
        return what was removed."""
        candidates = [p for p in self.new_entries() if p.name.startswith(LEFTOVER_PREFIXES) and p.is_file()
                      and not p.is_symlink()]
        busy = in_use(candidates)
        removed = []
        for path in candidates:
            if path in busy:
                continue
            try:
                path.unlink()
                removed.append(path)
            except OSError:
                pass
        return removed
