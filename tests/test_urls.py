"""Redis URLs: redlock._protocol.urls reads them as its documented grammar says, and as redis-py does.

Pure, no servers. Two references, each compared on generated URLs:

* the grammar as written for users in ``redlock.Redlock``'s docstring (docs/api.md): the
  schemes and the false words are read from that text, so the docs cannot drift from the
  parser unnoticed;
* the installed redis-py's own ``parse_url`` (a dev dependency; a user's install may lack
  it, which is the point of redlock._protocol.urls), with the few refusals the docstring lists.
  Where a redis-py release reads a URL otherwise, the failure names that release and both
  readings, so that a change of theirs shows up as a difference, not as a mystery.
"""

from __future__ import annotations

import inspect
import re
import string
from importlib.metadata import version
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlparse

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

import redlock
from redlock._protocol.urls import FALSE_WORDS, SCHEMES, parse_url

redis_connection = pytest.importorskip("redis.connection")
REDIS_PY = version("redis")

#: Query parameters redis-py converts (to numbers, lists, flags) that ours keeps as text: the
#: caller refuses them as parameters it does not use, so they never mean anything here.
_CONVERTED_ONLY_BY_REDIS_PY = frozenset(redis_connection.URL_QUERY_ARGUMENT_PARSERS) - {"db", "ssl_check_hostname"}


def redis_py(url: str) -> dict[str, Any] | str:
    """redis-py's reading of ``url`` (without its connection class), or its error's text."""
    try:
        settings = dict(redis_connection.parse_url(url))
    except ValueError as error:
        return f"error: {error}"
    settings.pop("connection_class", None)
    return settings


def ours(url: str) -> dict[str, Any] | str:
    try:
        return parse_url(url)
    except ValueError as error:
        return f"error: {error}"


# --- the documented grammar ------------------------------------------------------------------------

_GRAMMAR = inspect.getdoc(redlock.Redlock) or ""


def _grammar_item(pattern: str) -> list[str]:
    """The ````code```` words of the docstring's grammar item that ``pattern`` finds."""
    found = re.search(pattern, _GRAMMAR, re.DOTALL)
    assert found, f"Redlock's docstring no longer states its URL grammar ({pattern!r})"
    return re.findall(r"``([^`]+)``", found.group(1))


DOCUMENTED_SCHEMES = tuple(_grammar_item(r"\* scheme: (.*?), then")[:3])
DOCUMENTED_FALSE_WORDS = frozenset(_grammar_item(r"``ssl_check_hostname`` is false for (.*?) in any case"))
_SCHEME_ERROR = "error: Redis URL must specify one of the following schemes (redis://, rediss://, unix://)"


def documented(url: str) -> dict[str, Any] | str:
    """``url`` read by the grammar of Redlock's docstring, item by item (the query parameters
    it does not list kept as text: refusing them is the client's part, tested below)."""
    scheme, separator, _ = url.partition("://")
    if not separator or scheme.lower() not in DOCUMENTED_SCHEMES:
        return _SCHEME_ERROR
    try:
        parts = urlparse(url)
        settings: dict[str, Any] = {}
        for name, (value, *_) in parse_qs(parts.query).items():  # decoded once, first kept, empty dropped
            if name == "db":
                try:
                    settings[name] = int(value)
                except ValueError:
                    return "error: Invalid value for 'db' in connection URL."
            elif name == "ssl_check_hostname":
                settings[name] = value.lower() not in DOCUMENTED_FALSE_WORDS
            else:
                settings[name] = value
        if parts.username:
            settings["username"] = unquote(parts.username)
        if parts.password:
            settings["password"] = unquote(parts.password)
        if scheme.lower() == "unix":
            if not parts.path:
                return "error: a unix:// URL needs the socket's path, as in unix:///run/redis/redis.sock"
            return {**settings, "path": unquote(parts.path)}
        if parts.hostname:
            settings["host"] = unquote(parts.hostname)
        port = parts.port
    except ValueError as error:  # urllib's own: a bad port or IPv6 literal
        return f"error: {error}"
    if port == 0:
        return "error: port must be in 1..65535, got 0"
    if port is not None:
        settings["port"] = port
    path = unquote(parts.path).replace("/", "")
    if path and not _is_int(path):
        return f"error: the path must be a database number, as in redis://host:6379/0, got {parts.path!r}"
    if path and "db" not in settings:
        settings["db"] = int(path)
    return settings


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def test_the_docstring_states_the_grammar() -> None:
    assert tuple(f"{scheme}://" for scheme in DOCUMENTED_SCHEMES) == SCHEMES
    assert {word.lower() for word in FALSE_WORDS} == DOCUMENTED_FALSE_WORDS


def assert_reads_as_documented_and_as_redis_py(url: str) -> None:
    mine = ours(url)
    assert mine == documented(url), f"redlock._protocol.urls and the grammar of Redlock's docstring disagree on {url!r}"
    theirs = expected(url)
    assert mine == theirs, (
        f"redis-py {REDIS_PY} reads {url!r} as {theirs!r}; the documented grammar (Redlock's docstring, "
        f"docs/api.md) reads it as {mine!r}: a new reading of redis-py's, to adopt (and document) or to refuse"
    )


# --- generated URLs --------------------------------------------------------------------------------

# Text that URLs carry, escaped and not: letters of both cases, digits, the characters that
# mean something in a URL (escaped by quote), and a few beyond ASCII.
_TEXT = st.text(alphabet=string.ascii_letters + string.digits + "-._~:@/?#[]%+ &=é€", max_size=12)
_USER = st.one_of(
    st.just(""), _TEXT.map(lambda text: quote(text, safe="")), st.sampled_from(["user", "%3Auser", "u%40x"])
)
_HOST = st.one_of(
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,20}", fullmatch=True),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda address: f"[{address}]"),
    st.sampled_from(["", "localhost", "LocalHost", "[::1]", "host%2Dname", "[fe80::1%25eth0]"]),
)
_PORT = st.one_of(st.just(""), st.integers(0, 70000).map(lambda port: f":{port}"), st.sampled_from([":", ":x", ":-1"]))
_PATH = st.one_of(
    st.just(""),
    st.integers(-2, 20).map(lambda db: f"/{db}"),
    st.sampled_from(["/", "/0/", "//3", "/%31", "/x", "/1x", "/ 2", "/0;params"]),
    _TEXT.map(lambda text: "/" + quote(text, safe="/")),
)
_KEYS = st.sampled_from(
    [
        "db",
        "username",
        "password",
        "client_name",
        "ssl_ca_certs",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_cert_reqs",
        "ssl_check_hostname",
        "unknown_parameter",
    ]
)
_VALUE = st.one_of(
    st.integers(-1, 16).map(str),
    st.sampled_from(["", "true", "False", "no", "N", "0", "1", "off", "x y", "%2520", "a%26b"]),
    _TEXT.map(lambda text: quote(text, safe="")),
)
_QUERY = st.lists(st.tuples(_KEYS, _VALUE), max_size=4).map(
    lambda pairs: ("?" + "&".join(f"{key}={value}" for key, value in pairs)) if pairs else ""
)


_CASES = st.sampled_from([str.lower, str.upper, str.title])


@st.composite
def redis_urls(draw: st.DrawFn) -> str:
    scheme = draw(_CASES)(draw(st.sampled_from(["redis", "rediss", "unix"])))
    user, password = draw(_USER), draw(st.one_of(st.none(), _USER))
    userinfo = "" if not user and password is None else (user if password is None else f"{user}:{password}") + "@"
    if scheme.lower() == "unix":
        where = draw(st.sampled_from(["", "localhost"])) + draw(_PATH)
    else:
        where = draw(_HOST) + draw(_PORT) + draw(_PATH)
    return f"{scheme}://{userinfo}{where}{draw(_QUERY)}"


def expected(url: str) -> dict[str, Any] | str:
    """redis-py's reading of ``url``, but for the cases redlock/_protocol/urls.py lists, which it refuses."""
    theirs = redis_py(url)
    if isinstance(theirs, str):
        return theirs
    parts = urlparse(url)
    if parts.scheme == "unix":  # urllib lower-cases the scheme
        return (
            theirs
            if "path" in theirs
            else "error: a unix:// URL needs the socket's path, as in unix:///run/redis/redis.sock"
        )
    if parts.port == 0:
        return "error: port must be in 1..65535, got 0"
    try:
        int(unquote(parts.path).replace("/", "") or "0")
    except ValueError:
        return f"error: the path must be a database number, as in redis://host:6379/0, got {parts.path!r}"
    # Ours keeps as text what only redis-py converts: the same keys, and the caller refuses them.
    return {
        key: parse_qs(parts.query)[key][0] if key in _CONVERTED_ONLY_BY_REDIS_PY else value
        for key, value in theirs.items()
    }


@given(redis_urls())
@example("redis://h:0")
@example("redis://h/x?db=2")
@example("redis://:secret@h")
@example("redis://Host%2Dname:1")
@example("rediss://h?ssl_check_hostname=no&ssl_cert_reqs=none")
@example("redis://h?socket_timeout=1.5")
@example("REDIS://h")
@example("UnIx:///0?ssl_check_hostname=off")
@example("rediss://h?ssl_check_hostname=OFF")
def test_reads_urls_as_documented_and_as_redis_py_does(url: str) -> None:
    assert_reads_as_documented_and_as_redis_py(url)


@given(
    st.sampled_from(["redis://", "rediss://", "unix://", "http://", "", "REDIS://", "Rediss://", "UNIX://", "redis:"]),
    st.text(max_size=40),
)
def test_reads_any_text_as_documented_and_as_redis_py_does(scheme: str, text: str) -> None:
    url = scheme + text
    theirs = expected(url)
    # A value redis-py fails to convert (`?socket_timeout=x`) is text to ours, refused by the caller.
    assume(not (isinstance(theirs, str) and theirs.startswith("error: Invalid value for") and "'db'" not in theirs))
    assert_reads_as_documented_and_as_redis_py(url)


# --- examples --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "settings"),
    [
        ("redis://h", {"host": "h"}),
        ("redis://H.Example.COM:7001", {"host": "h.example.com", "port": 7001}),
        ("redis://[::1]:7001/2", {"host": "::1", "port": 7001, "db": 2}),
        ("redis://[FE80::1%25eth0]:7001", {"host": "fe80::1%eth0", "port": 7001}),
        ("redis://:s%40cret@h", {"host": "h", "password": "s@cret"}),
        ("redis://us%3Aer:p%2Fw@h", {"host": "h", "username": "us:er", "password": "p/w"}),
        ("redis://user:@h", {"host": "h", "username": "user"}),
        ("redis://h/3?db=5", {"host": "h", "db": 5}),
        ("redis://h/%31", {"host": "h", "db": 1}),
        ("redis://h/", {"host": "h"}),
        ("redis://h?db=", {"host": "h"}),
        ("redis://h?client_name=a%20b&client_name=c", {"host": "h", "client_name": "a b"}),
        ("redis://h?ssl_ca_certs=%2520", {"host": "h", "ssl_ca_certs": "%20"}),  # decoded once
        ("rediss://h?ssl_check_hostname=No", {"host": "h", "ssl_check_hostname": False}),
        ("rediss://h?ssl_check_hostname=off", {"host": "h", "ssl_check_hostname": False}),
        ("rediss://h?ssl_check_hostname=on", {"host": "h", "ssl_check_hostname": True}),
        ("REDIS://H:1/2", {"host": "h", "port": 1, "db": 2}),
        ("Unix:///s.sock", {"path": "/s.sock"}),
        ("unix:///run/redis%20x.sock?db=1", {"path": "/run/redis x.sock", "db": 1}),
        ("unix://u:p@/s.sock", {"path": "/s.sock", "username": "u", "password": "p"}),
        ("redis://h?socket_timeout=abc", {"host": "h", "socket_timeout": "abc"}),
    ],
)
def test_examples(url: str, settings: dict[str, object]) -> None:
    assert parse_url(url) == settings


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://h", r"^Redis URL must specify one of the following schemes \(redis://, rediss://, unix://\)$"),
        ("redis:h", r"^Redis URL must specify one of the following schemes"),
        ("redis://h?db=x", r"^Invalid value for 'db' in connection URL\.$"),
        ("redis://h:x", "Port could not be cast to integer value"),
        ("redis://h:65536", "Port out of range"),
        ("redis://[::1", "Invalid IPv6 URL"),
        # redis-py reads these silently as something else (redlock/_protocol/urls.py says why not here).
        ("redis://h:0", r"^port must be in 1\.\.65535, got 0$"),
        ("redis://h/1x", "the path must be a database number"),
        ("redis://h/x?db=1", "the path must be a database number"),
        ("unix://", "needs the socket's path"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_url(url)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://", r"masters\[0\] has no host"),
        ("http://h", r"masters\[0\] is not a valid Redis URL .*schemes"),
        ("redis://h/1x", r"masters\[0\] is not a valid Redis URL .*database number"),
        ("redis://h?socket_timeout=1", r"masters\[0\] has URL parameters this client does not use: socket_timeout"),
        ("redis://h?connection_class=x", r"masters\[0\] has URL parameters this client does not use: connection_class"),
        ("redis://h?db=-1", r"masters\[0\]: db must be a whole number of zero or more"),
        # TLS parameters on a URL that is never TLS: the password and tokens would go in clear.
        ("redis://h?ssl_cert_reqs=required", r"masters\[0\] has TLS parameters \(ssl_cert_reqs\) on a redis:// URL"),
        (
            "REDIS://h?ssl_ca_certs=/ca.pem&ssl_check_hostname=yes",
            r"\(ssl_ca_certs, ssl_check_hostname\).*use rediss://",
        ),
        ("unix:///tmp/x.sock?ssl_certfile=c.pem", r"on a unix:// URL, which is never TLS: use rediss://"),
    ],
)
def test_the_client_names_the_bad_master(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        redlock.Redlock([url])


def test_the_scheme_in_any_case_picks_tls_and_sockets() -> None:
    rl = redlock.Redlock(["REDISS://localhost:2?ssl_cert_reqs=none", "Redis://127.0.0.1:1", "UNIX:///tmp/x.sock"])
    try:
        tls, plain, unix = rl.masters
        assert (tls.tls, plain.tls, plain.unix_socket, unix.unix_socket) == (True, False, False, True)
    finally:
        rl.close()


@pytest.mark.parametrize(
    ("query", "checks_hostname"),
    [
        ("", True),
        ("?ssl_cert_reqs=required", True),
        # redis-py keeps the host name check for optional too: only its own flag turns it off.
        ("?ssl_cert_reqs=optional", True),
        ("?ssl_cert_reqs=optional&ssl_check_hostname=false", False),
        ("?ssl_cert_reqs=required&ssl_check_hostname=off", False),
        ("?ssl_cert_reqs=none", False),
    ],
)
def test_the_host_name_is_checked_unless_turned_off_by_name(query: str, checks_hostname: bool) -> None:
    rl = redlock.Redlock([f"rediss://localhost:2{query}"])
    try:
        context = rl.masters[0].ssl_context
        assert context is not None
        assert context.check_hostname is checks_hostname
        settings = redis_connection.parse_url(f"rediss://localhost:2{query}")
        settings.pop("connection_class")
        theirs = redis_connection.SSLConnection(**settings)
        assert theirs.check_hostname is checks_hostname, f"redis-py {REDIS_PY} reads {query!r} otherwise"
    finally:
        rl.close()


def test_a_url_names_its_master() -> None:
    rl = redlock.Redlock(["redis://u:p@127.0.0.1:1/2", "rediss://localhost:2?ssl_cert_reqs=none", "unix:///tmp/x.sock"])
    try:
        plain, tls, unix = rl.masters
        assert (plain.host, plain.port, plain.credentials.username, plain.credentials.password) == (
            "127.0.0.1",
            1,
            "u",
            "p",
        )
        assert plain.credentials.db == 2
        assert (tls.tls, tls.server_hostname) == (True, None)
        assert (unix.unix_socket, unix.path) == (True, "/tmp/x.sock")
    finally:
        rl.close()
