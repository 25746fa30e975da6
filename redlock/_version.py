"""The version of redlock-quorum: its one source.

pyproject.toml reads it (``[tool.setuptools.dynamic]``) for the distribution's metadata, and
:mod:`redlock` re-exports it as ``redlock.__version__``, so a checkout that was never
installed knows its version too. docs/release.md says when to change it.
"""

__version__ = "0.1.0"
