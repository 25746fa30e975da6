"""The one place where redis-py's exceptions become per-master outcomes.

Drivers catch whatever a connection raises and ask :func:`failure_status` what it means,
so no redis-py exception reaches the public API raw.
"""

from __future__ import annotations

import asyncio

from redis import exceptions as redis_errors

from redlock._core import ErrorReply
from redlock.exceptions import NodeStatus


def error_reply(error: redis_errors.ResponseError) -> ErrorReply:
    """A master's error reply, as the core sees it."""
    return ErrorReply(str(error), noscript=isinstance(error, redis_errors.NoScriptError))


def failure_status(error: BaseException) -> tuple[NodeStatus, str]:
    """How a master failed, judging by what its connection raised, and a one-line detail."""
    detail = str(error) or type(error).__name__
    if isinstance(error, redis_errors.TimeoutError | TimeoutError | asyncio.TimeoutError):
        return NodeStatus.TIMEOUT, detail
    if isinstance(error, redis_errors.ResponseError):
        return NodeStatus.ERROR, detail
    if isinstance(error, redis_errors.ConnectionError | ConnectionError | OSError):
        return NodeStatus.UNREACHABLE, detail
    return NodeStatus.ERROR, f"{type(error).__name__}: {detail}"
