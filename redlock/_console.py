"""A command line's edge that every command of the project shares: a reader that goes away.

``redlock status NAME | head -1`` or ``python -m chaos list | true``: the reader stops
reading before the command has written everything. That is the reader's choice, not a
failure of the command, so it ends quietly, with the status a shell gives a process killed by
SIGPIPE (128 + 13), rather than with a ``BrokenPipeError`` traceback.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

__all__ = ["READER_GONE", "to_a_reader"]

#: The exit status of a command whose reader went away: a shell's for death by SIGPIPE.
READER_GONE = 128 + signal.SIGPIPE


def to_a_reader(main: Callable[[], int]) -> int:
    """``main()``'s exit status, its output flushed; :data:`READER_GONE` if the reader left."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit, which would raise once more: point it at
        # /dev/null, so that the flush at exit has somewhere to go.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return READER_GONE
    return code
