"""A command line's edges that every command of the project shares: a reader that goes away,
and text from elsewhere that must not drive the terminal.

``redlock status NAME | head -1`` or ``python -m chaos list | true``: the reader stops
reading before the command has written everything. That is the reader's choice, not a
failure of the command, so it ends quietly, with the status a shell gives a process killed by
SIGPIPE (128 + 13), rather than with a ``BrokenPipeError`` traceback.

A token, a value or an error that a master sent is whatever whoever wrote that key (or runs
that master) chose: printed as it is, an ESC sequence in it would clear or rewrite the
operator's screen, set the window title, or hide a line (``\r``). :func:`printable` is how
such text is shown, in text and JSON output alike.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

__all__ = ["READER_GONE", "printable", "to_a_reader"]

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


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on instead of showing escaped as
    Python writes it (``\\x1b``, ``\\u202e``: controls C0 and C1, DEL, bidirectional and
    other format characters, line and paragraph separators), and backslashes doubled, so that
    an escape shown can be told from the same characters sent as text."""
    return "".join(map(_shown, text))


def _shown(char: str) -> str:
    if char == "\\":
        return "\\\\"
    if char.isprintable():
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
