"""Signals at any point: a handler that raises (as Python's SIGINT handler does) never
crashes the process, whatever C code it lands in.

Pure: the encoding of commands is where a signal met C code that mishandled it
(``hiredis.pack_command`` made an ``int`` text with ``PyObject_Repr``, which ran the handler
and then used the NULL its exception left: SIGSEGV). A child process takes a storm of raising
handlers, one every 0.1 ms, for two seconds, in the encoding alone, so that the storm lands
on every instruction of it; the child must end on its own, having been interrupted often.
"""

from __future__ import annotations

import subprocess
import sys

from .cli_helpers import PATIENCE

STORM = """
import signal, sys, time
from redlock import _connection

class Tick(Exception):
    pass

deadline = time.monotonic() + 2.0

def handler(signum, frame):
    # Only in the encoding (its own lines, or the call into hiredis): the loop stays calm.
    code = frame.f_code if frame is not None else None
    inside = code is not None and (code.co_filename == _connection.__file__ or code.co_name == "encode_once")
    if inside and time.monotonic() < deadline:
        raise Tick

def encode_once():
    return _connection.encode(("SET", "k", "v", "PX", 3000, "EX", 10**30))

signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.0001)
interrupted = encoded = 0
while time.monotonic() < deadline:
    try:
        encode_once()
        encoded += 1
    except Tick:
        interrupted += 1
signal.setitimer(signal.ITIMER_REAL, 0)
print(interrupted, encoded)
"""


def test_a_storm_of_raising_signal_handlers_in_the_encoding_never_crashes() -> None:
    done = subprocess.run([sys.executable, "-c", STORM], capture_output=True, text=True, timeout=PATIENCE, check=False)
    assert done.returncode == 0, f"the child died ({done.returncode}): {done.stderr[-2000:]}"
    interrupted, encoded = map(int, done.stdout.split())
    assert interrupted >= 100, "the storm hardly landed: the test proves nothing"
    assert encoded >= 1000
