"""The C library's calls that Python's standard library does not wrap, through one handle:
glibc's ``malloc_trim`` and ``mallopt`` (the heap) and Linux's ``prctl`` (processes).

Each is a no-op that says so (``False``) where the C library or the call is missing (musl
has no ``malloc_trim``; a platform may have no ``prctl``): none is needed for answers to be
right, only for memory or for how processes end.
"""

import contextlib
import ctypes
import ctypes.util
import os
from collections.abc import Callable


def _find_libc() -> ctypes.CDLL | None:
    """The C library by name, else the running program's own symbols (``dlopen(NULL)``: where
    ``find_library`` finds nothing, as on musl without compilers, libc is linked in all the same)."""
    for name in (ctypes.util.find_library("c"), None):
        try:
            return ctypes.CDLL(name, use_errno=True)
        except (OSError, TypeError):
            continue
    return None


def _find(name: str) -> Callable[..., int] | None:
    try:
        found: Callable[..., int] = getattr(_LIBC, name)
    except AttributeError:  # no C library, or one without the call
        return None
    return found


_LIBC = _find_libc()
_MALLOC_TRIM = _find("malloc_trim")
_MALLOPT = _find("mallopt")
_PRCTL = _find("prctl")

PR_SET_PDEATHSIG = 1
"""``prctl``'s option that sends a signal to this process when its parent exits (``linux/prctl.h``)."""
PR_SET_CHILD_SUBREAPER = 36
"""``prctl``'s option that makes orphaned descendants this process's children (``linux/prctl.h``)."""
_M_ARENA_MAX = -8
"""``mallopt``'s parameter for the most arenas glibc's malloc makes (``malloc.h``)."""


def release_free_memory() -> bool:
    """Give the C heap's free pages back to the kernel (glibc's ``malloc_trim(0)``, which
    releases every free page inside the heap with ``MADV_DONTNEED``, where ``free`` trims
    only its top); ``False`` where the C library has no such call.

    A load frees a great deal: each page's protobuf response (about 15 MB for 100,000 keys)
    and every record's decoded JSON. glibc keeps most of it mapped, in the middle of the
    heap, for later allocations that never come, and RSS stays that much higher:
    ``malloc_trim(0)`` after a load of 1,000,000 shard records took ``feddns serve``'s RSS
    from 411 - 449 MB to 367 MB (bench/serve_load.py; docs/performance.md, "Memory").
    """
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


def one_malloc_arena() -> bool:
    """Let glibc's malloc use one arena for every thread (``mallopt(M_ARENA_MAX, 1)``), unless
    ``MALLOC_ARENA_MAX`` says otherwise; ``False`` where it was not set. Call it before the
    process starts threads.

    A load's pages are read by the event loop's thread while the one before is stored by
    another (``asyncio.to_thread``); by default glibc gives that thread an arena of its own,
    whose freed pages stay mapped around what lives on. One process holding 1,000,000 shard
    records: 327 MB RSS once every value was read with an arena per thread, 290 MB with one,
    and a peak of 353 MB instead of 437 (docs/performance.md, "Memory of the records"). The
    threads that allocate share the GIL, so one arena costs them no waiting worth measuring.
    """
    if "MALLOC_ARENA_MAX" in os.environ or _MALLOPT is None:
        return False
    return bool(_MALLOPT(_M_ARENA_MAX, 1) == 1)


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value, 0, 0, 0)`` (Linux, ``man 2 prctl``): ``True`` when it succeeded,
    ``False`` when it failed or there is no such call."""
    if _PRCTL is None:
        return False
    with contextlib.suppress(OSError, TypeError):
        return bool(_PRCTL(option, value, 0, 0, 0) == 0)
    return False
