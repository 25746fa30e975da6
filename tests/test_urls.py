"""Redis URLs: redlock._urls reads them as redis-py does, without redis-py.

Pure, no servers. The property tests compare with redis-py's own parse_url on generated
URLs (redis-py is a dev dependency; a user's install may lack it, which is the point of
redlock._urls); the example tests pin the edge cases and the few places where redlock
refuses what redis-py reads silently as something else (redlock/_urls.py lists them).
"""

from __future__ import annotations

import string
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlparse

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

import redlock
from redlock._urls import parse_url

redis_connection = pytest.importorskip("redis.connection")

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


@st.composite
def redis_urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["redis", "rediss", "unix"]))
    user, password = draw(_USER), draw(st.one_of(st.none(), _USER))
    userinfo = "" if not user and password is None else (user if password is None else f"{user}:{password}") + "@"
    if scheme == "unix":
        where = draw(st.sampled_from(["", "localhost"])) + draw(_PATH)
    else:
        where = draw(_HOST) + draw(_PORT) + draw(_PATH)
    return f"{scheme}://{userinfo}{where}{draw(_QUERY)}"


def expected(url: str) -> dict[str, Any] | str:
    """redis-py's reading of ``url``, but for the cases redlock/_urls.py lists, which it refuses."""
    theirs = redis_py(url)
    if isinstance(theirs, str):
        return theirs
    parts = urlparse(url)
    if parts.scheme == "unix":
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
def test_reads_urls_as_redis_py_does(url: str) -> None:
    assert ours(url) == expected(url)


@given(st.sampled_from(["redis://", "rediss://", "unix://", "http://", "", "REDIS://"]), st.text(max_size=40))
def test_reads_any_text_as_redis_py_does(scheme: str, text: str) -> None:
    url = scheme + text
    theirs = expected(url)
    # A value redis-py fails to convert (`?socket_timeout=x`) is text to ours, refused by the caller.
    assume(not (isinstance(theirs, str) and theirs.startswith("error: Invalid value for") and "'db'" not in theirs))
    assert ours(url) == theirs


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
        (
            "rediss://h?ssl_check_hostname=off",
            {"host": "h", "ssl_check_hostname": True},
        ),  # as redis-py: not a false word
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
        ("redis://h?db=x", r"^Invalid value for 'db' in connection URL\.$"),
        ("redis://h:x", "Port could not be cast to integer value"),
        ("redis://h:65536", "Port out of range"),
        ("redis://[::1", "Invalid IPv6 URL"),
        # redis-py reads these silently as something else (redlock/_urls.py says why not here).
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
    ],
)
def test_the_client_names_the_bad_master(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        redlock.Redlock([url])


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
