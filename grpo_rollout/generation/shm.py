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
from typing import Iterable, List, Set

SHM = Path("/dev/shm")
#: Names of the segments vLLM's processes create (Python's ``multiprocessing.shared_memory``, torch, semaphores).
LEFTOVER_PREFIXES = ("psm_", "torch_", "sem.")


def shm_entries(root: Path = SHM) -> Set[str]:
    """Names in ``root`` (empty when it does not exist)."""
    try:
        return set(os.listdir(root))
    except OSError:
        return set()


def in_use(paths: Iterable[Path]) -> Set[Path]:
    """The ``paths`` some live process has open (``/proc/<pid>/fd``) or mapped (``/proc/<pid>/maps``); processes
    this user may not inspect are skipped."""
    wanted = {str(p) for p in paths}
    found: Set[str] = set()
    if not wanted:
        return set()
    for pid in (d for d in os.listdir("/proc") if d.isdigit()):
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    name = line.rstrip("\n").split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
                    name = name.removesuffix(" (deleted)")
                    if name in wanted:
                        found.add(name)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target in wanted:
                    found.add(target)
        except OSError:
            continue
    return {Path(p) for p in found}


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
