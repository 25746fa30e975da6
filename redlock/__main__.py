"""``python -m redlock``: the ``redlock`` command line (see :mod:`redlock.cli`)."""

from redlock.cli import main_entry

if __name__ == "__main__":
    main_entry()
