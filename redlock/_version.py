"""The package's version, in a module of its own so that any layer may read it."""

import importlib.metadata

try:
    #: The installed distribution's version (``redlock --version`` prints it).
    __version__ = importlib.metadata.version("redlock-quorum")
except importlib.metadata.PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"
