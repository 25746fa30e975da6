"""Redis URLs read without redis-py: ``redis://``, ``rediss://`` and ``unix://``.

Pure: a string in, the settings it names out, with no I/O (not even a name lookup). A URL
means here what it means to redis-py's ``redis.connection.parse_url`` (redis-py 8.2, the
first to read schemes in any case, as RFC 3986 §3.1 says, and ``off`` as false), so that
one URL names the same server, database and user to this client as to the redis-py clients
of the same application; the settings carry redis-py's names (``host``, ``port``, ``path``,
``db``, ``username``, ``password``, and each query parameter under its own name). The
grammar is written out for users in :class:`redlock.Redlock`'s docstring (docs/api.md);
tests/test_urls.py checks this parser against that text and against the installed redis-py.

Where redis-py reads a URL silently as something its writer cannot have meant, this parser
raises ``ValueError`` instead:

* a path that is not a database number (``redis://host/1x``): redis-py drops it and uses
  database 0, and two clients that meant one database but use two exclude nobody;
* port 0: redis-py takes it for no port at all, 6379;
* a ``unix://`` URL without a socket path.

Of the query parameters, only ``db`` (an int) and ``ssl_check_hostname`` (a bool) are
converted, as redis-py converts them; the others keep their text, and the caller decides
which it accepts (:mod:`redlock._protocol.config` refuses those it does not use).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, unquote, urlparse

__all__ = ["SCHEMES", "parse_url", "read_bool", "redacted", "redacted_error", "scheme_of"]

SCHEMES = ("redis://", "rediss://", "unix://")

#: What redis-py's ``to_bool`` reads as False (compared upper-cased, 8.2 on); any other text is True.
FALSE_WORDS = frozenset({"0", "F", "FALSE", "N", "NO", "OFF"})


# redis-py reads `?password=...` too.
_QUERY_PASSWORD = re.compile(r"(?P<kept>[?&]password=)[^&#]*", re.IGNORECASE)


def redacted(url: str) -> str:
    """``url`` with its password, if any, shown as ``***``; for messages about any URL,
    parsable or not, since the ones that do not parse are the ones that get printed.

    The password runs from the first ``:`` of the user part to the *last* ``@``, so that one
    with an ``@``, ``/`` or ``:`` its writer forgot to percent-encode is hidden whole, and so
    is one in a URL without its ``//`` or its scheme.
    """
    head, at, host = url.rpartition("@")
    if at:
        scheme, slashes, userinfo = head.partition("//")
        if not slashes:
            scheme, userinfo = "", head
        user, colon, _ = userinfo.partition(":")
        if colon:
            url = f"{scheme}{slashes}{user}:***@{host}"
    return _QUERY_PASSWORD.sub(r"\g<kept>***", url)


def redacted_error(error: ValueError, url: str) -> str:
    """What :func:`parse_url` said of ``url``, with every piece of the URL it quotes hidden when
    ``url`` carries a password: urllib quotes a port it cannot read, and in a URL whose
    password holds an unencoded ``#`` or ``/`` that port, or that path, is the password."""
    if redacted(url) == url:
        return str(error)
    return re.sub(r"'[^']*'", "'***'", str(error))


def scheme_of(url: str) -> str:
    """``redis``, ``rediss`` or ``unix``: the scheme of ``url`` in lower case, as RFC 3986 says
    schemes compare; ``ValueError`` for any other. Callers that pick TLS or a socket by the
    scheme ask here, so that ``REDISS://`` can never mean plain TCP."""
    if not url.lower().startswith(SCHEMES):
        # redis-py's wording, which callers may already match on.
        raise ValueError("Redis URL must specify one of the following schemes (redis://, rediss://, unix://)")
    return url.partition("://")[0].lower()


def read_bool(text: str) -> bool:
    """A flag's text as redis-py reads it: false for the :data:`FALSE_WORDS`, true otherwise."""
    return text.upper() not in FALSE_WORDS


def parse_url(url: str) -> dict[str, object]:
    """The settings ``url`` names; ``ValueError`` saying what is wrong with a bad one."""
    scheme = scheme_of(url)
    parts = urlparse(url)
    settings: dict[str, object] = {}
    # parse_qs decodes each value once and drops empty ones (`?db=`), as redis-py relies on.
    for name, values in parse_qs(parts.query).items():
        settings[name] = _query_value(name, values[0])
    # An empty user (`redis://:secret@host`) is no user: the server's default one.
    if parts.username:
        settings["username"] = unquote(parts.username)
    if parts.password:
        settings["password"] = unquote(parts.password)
    if scheme == "unix":
        if not parts.path:
            raise ValueError("a unix:// URL needs the socket's path, as in unix:///run/redis/redis.sock")
        settings["path"] = unquote(parts.path)
        return settings
    if parts.hostname:
        settings["host"] = unquote(parts.hostname)
    port = parts.port  # urllib's ValueError for text or a number beyond 65535
    if port == 0:
        raise ValueError("port must be in 1..65535, got 0")
    if port is not None:
        settings["port"] = port
    database = _path_database(parts.path)
    # A `?db=` wins over the path, as in redis-py.
    if database is not None and "db" not in settings:
        settings["db"] = database
    return settings


def _query_value(name: str, text: str) -> object:
    if name == "db":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"Invalid value for '{name}' in connection URL.") from None
    if name == "ssl_check_hostname":
        return read_bool(text)
    return text


def _path_database(path: str) -> int | None:
    """The database number a URL's path names (``/2``), or None for no path (or ``/``)."""
    # redis-py drops every slash before reading the number; so does this, to agree on `/2/`.
    text = unquote(path).replace("/", "")
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"the path must be a database number, as in redis://host:6379/0, got {path!r}") from None
