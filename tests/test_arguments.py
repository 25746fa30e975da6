"""Every bad argument is a TypeError or ValueError naming it, raised before any traffic.

The masters named here do not exist (port 1 on loopback refuses at once, and no test here
would get far enough to connect): an error raised by validation is the only way to pass.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

import redlock
import redlock.asyncio
from redlock._api import locked as _locked
from redlock._api import state as _lock

NOWHERE = ["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"]
CLIENTS = [redlock.Redlock, redlock.asyncio.Redlock]


@pytest.mark.parametrize("make", CLIENTS)
@pytest.mark.parametrize(
    ("masters", "kwargs", "error", "named"),
    [
        ([], {}, ValueError, "masters"),
        ("redis://127.0.0.1:1", {}, TypeError, "masters"),
        (None, {}, TypeError, "masters"),
        ([42], {}, TypeError, r"masters\[0\]"),
        (["http://127.0.0.1:1"], {}, ValueError, r"masters\[0\]"),
        (["redis://"], {}, ValueError, r"masters\[0\]"),
        (["redis://127.0.0.1:1", "redis://127.0.0.1:1/3"], {}, ValueError, "same server twice"),
        (NOWHERE, {"node_timeout": 0}, ValueError, "node_timeout"),
        (NOWHERE, {"node_timeout": -1}, ValueError, "node_timeout"),
        (NOWHERE, {"node_timeout": float("nan")}, ValueError, "node_timeout"),
        (NOWHERE, {"node_timeout": "50ms"}, TypeError, "node_timeout"),
        (NOWHERE, {"node_timeout": True}, TypeError, "node_timeout"),
        (NOWHERE, {"clock_drift_factor": 1.0}, ValueError, "clock_drift_factor"),
        (NOWHERE, {"clock_drift_factor": -0.1}, ValueError, "clock_drift_factor"),
        (NOWHERE, {"clock_drift_factor": "1%"}, TypeError, "clock_drift_factor"),
        (NOWHERE, {"retry_delay": 0}, ValueError, "retry_delay"),
        (NOWHERE, {"unavailable_timeout": -1}, ValueError, "unavailable_timeout"),
        (NOWHERE, {"wake_on_release": "yes"}, TypeError, "wake_on_release"),
        (NOWHERE, {"clock": 3}, TypeError, "clock"),
        (NOWHERE, {"health_check_interval": -1}, ValueError, "health_check_interval"),
        (NOWHERE, {"health_check_interval": "30s"}, TypeError, "health_check_interval"),
    ],
)
def test_bad_client_arguments(
    make: Any, masters: Any, kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        make(masters, **kwargs)


def test_each_api_takes_only_its_own_kind_of_redis_client() -> None:
    sync_client, async_client = redis.Redis(port=1), redis.asyncio.Redis(port=1)
    with pytest.raises(TypeError, match=r"masters\[0\].*redis.Redis client"):
        redlock.Redlock([async_client])
    with pytest.raises(TypeError, match=r"masters\[0\].*redis.asyncio.Redis client"):
        redlock.asyncio.Redlock([sync_client])
    sync_client.close()


@pytest.mark.parametrize("make", CLIENTS)
@pytest.mark.parametrize(
    ("args", "kwargs", "error", "named"),
    [
        ((42,), {}, TypeError, "name"),
        (("",), {}, ValueError, "name"),
        (("redlock-quorum:order:jobs",), {}, ValueError, "name must not start with 'redlock-quorum:'"),
        (("redlock-quorum:jobs",), {}, ValueError, "name must not start with 'redlock-quorum:'"),
        (("x",), {"ttl": 0}, ValueError, "ttl"),
        (("x",), {"ttl": -5}, ValueError, "ttl"),
        (("x",), {"ttl": "10s"}, TypeError, "ttl"),
        (("x",), {"ttl": 0.005}, ValueError, "ttl"),
        (("x",), {"ttl": 0.052}, ValueError, "ttl.*node_timeout"),  # no validity after one round
        (("x",), {"timeout": -1}, ValueError, "timeout"),
        (("x",), {"ttl": 0.2, "auto_extend": True}, ValueError, "too short to auto-extend"),
        (("x",), {"auto_extend": "yes"}, TypeError, "auto_extend"),
        (("x",), {"auto_extend": True, "on_lost": 42}, TypeError, "on_lost"),
        (("x",), {"on_lost": print}, ValueError, "auto_extend=True"),
        (("x",), {"fencing": 1}, TypeError, "fencing"),
    ],
)
def test_bad_lock_arguments(
    make: Any, args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    rl = make(NOWHERE, node_timeout=0.05)
    with pytest.raises(error, match=named):
        rl.lock(*args, **kwargs)


def test_cancel_on_lost_needs_auto_extension() -> None:
    with pytest.raises(ValueError, match="auto_extend=True"):
        redlock.asyncio.Redlock(NOWHERE).lock("x", cancel_on_lost=True)
    with pytest.raises(TypeError, match="cancel_on_lost"):
        redlock.asyncio.Redlock(NOWHERE).lock("x", auto_extend=True, cancel_on_lost="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"blocking": "no"}, TypeError, "blocking"),
        ({"timeout": -1}, ValueError, "timeout"),
        ({"timeout": "1s"}, TypeError, "timeout"),
        ({"blocking": False, "timeout": 1.0}, ValueError, "non-blocking"),
    ],
)
def test_bad_acquire_arguments_fail_before_any_traffic(
    kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    lock = redlock.Redlock(NOWHERE).lock("x")
    with pytest.raises(error, match=named):
        lock.acquire(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [({"blocking": "no"}, TypeError, "blocking"), ({"blocking": False, "timeout": 1.0}, ValueError, "non-blocking")],
)
def test_bad_async_acquire_arguments_fail_before_any_traffic(
    kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    lock = redlock.asyncio.Redlock(NOWHERE).lock("x")
    with pytest.raises(error, match=named):
        asyncio.run(lock.acquire(**kwargs))


def test_extend_with_a_bad_ttl_is_refused_before_traffic() -> None:
    lock = redlock.Redlock(NOWHERE).lock("x")
    with pytest.raises(ValueError, match="ttl"):
        lock.extend(ttl=-1)


@pytest.mark.parametrize("make", CLIENTS)
@pytest.mark.parametrize(("limit", "error"), [(None, TypeError), (0, ValueError), ("3", TypeError), (True, TypeError)])
def test_a_semaphore_needs_a_limit_before_any_traffic(make: Any, limit: Any, error: type[Exception]) -> None:
    rl = make(NOWHERE)
    with pytest.raises(error, match="limit"):
        rl.semaphore("x", limit=limit)


# --- the checked specs a client keeps (redlock._api.state: _settings_key) ---------------------------

OTHERS = [
    "redis://127.0.0.1:4",
    "redis://127.0.0.1:5",
    "redis://127.0.0.1:6",
    "redis://127.0.0.1:7",
    "redis://127.0.0.1:8",
]


class _Seconds(float):
    """A float whose == says yes to anything: were it cached, it would match every entry."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = float.__hash__


@pytest.mark.parametrize("make", CLIENTS)
@pytest.mark.parametrize(
    ("good", "bad", "error", "named"),
    [
        ({"ttl": 1}, {"ttl": True}, TypeError, "ttl"),  # True == 1 and hashes alike
        ({"ttl": 1.0}, {"ttl": True}, TypeError, "ttl"),
        ({"lock_delay": 0}, {"lock_delay": False}, TypeError, "lock_delay"),
        ({"lock_delay": 0.0}, {"lock_delay": False}, TypeError, "lock_delay"),
        ({"retry_delay": 1}, {"retry_delay": True}, TypeError, "retry_delay"),
        ({"ttl": 10.0}, {"ttl": float("nan")}, ValueError, "ttl"),  # (nan is not even equal to nan)
        ({"fencing": False}, {"fencing": 0}, TypeError, "fencing"),
        ({"auto_extend": False}, {"auto_extend": 0}, TypeError, "auto_extend"),
        ({"reentrant": False}, {"reentrant": 0}, TypeError, "reentrant"),
    ],
)
def test_a_value_equal_to_a_cached_one_is_still_checked(
    make: Any, good: dict[str, Any], bad: dict[str, Any], error: type[Exception], named: str
) -> None:
    rl = make(NOWHERE)
    rl.lock("x", **good)
    rl.lock("y", **good)  # (now from the cache)
    with pytest.raises(error, match=named):
        rl.lock("z", **bad)


@pytest.mark.parametrize("make", CLIENTS)
def test_a_cached_spec_still_checks_the_name_and_a_semaphores_limit(make: Any) -> None:
    rl = make(NOWHERE)
    rl.lock("x", ttl=5)
    rl.semaphore("s", limit=1)
    with pytest.raises(ValueError, match="name must not start with 'redlock-quorum:'"):
        rl.lock("redlock-quorum:order:x", ttl=5)
    with pytest.raises(ValueError, match="UTF-8"):
        rl.lock("\udcff", ttl=5)
    with pytest.raises(TypeError, match="limit"):
        rl.semaphore("s", limit=True)
    # A list of names after a lock on one name with the same settings: a lock on both.
    assert rl.lock(["b", "a", "b"], ttl=5).names == ("a", "b")


@pytest.mark.parametrize("make", CLIENTS)
def test_a_value_of_a_subclass_is_never_served_from_the_cache(make: Any) -> None:
    rl = make(NOWHERE)
    assert rl.lock("x", ttl=2.0).ttl == 2.0
    assert rl.lock("x", ttl=_Seconds(30.0)).ttl == 30.0
    with pytest.raises(ValueError, match="ttl"):
        rl.lock("x", ttl=_Seconds(-1.0))


@pytest.mark.parametrize("make", CLIENTS)
def test_each_client_checks_against_its_own_settings(make: Any) -> None:
    """A spec one client checked is not another's: the masters, node_timeout (which a ttl
    must leave validity after) and retry_delay are each client's own."""
    fast = make(NOWHERE, node_timeout=0.05, retry_delay=0.1)
    slow = make(OTHERS, node_timeout=0.5, retry_delay=0.7)
    one = fast.lock("x", ttl=0.4)
    assert (one._spec.node_names, one._spec.node_timeout, one._spec.retry_delay) == (
        ("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"),
        0.05,
        0.1,
    )
    with pytest.raises(ValueError, match=r"ttl=0\.4 leaves no validity once a round takes node_timeout=0\.5"):
        slow.lock("x", ttl=0.4)
    other = slow.lock("x", ttl=10)
    assert fast.lock("y", ttl=10)._spec.quorum == 2
    assert (other._spec.node_names[0], other._spec.node_timeout, other._spec.retry_delay, other._spec.quorum) == (
        "127.0.0.1:4",
        0.5,
        0.7,
        3,
    )


@pytest.mark.parametrize("make", CLIENTS)
def test_the_cache_of_checked_specs_is_bounded(make: Any) -> None:
    rl = make(NOWHERE)
    for milliseconds in range(1000, 1000 + 3 * _lock.SPECS_KEPT):
        assert rl.lock("x", ttl=milliseconds / 1000).ttl == milliseconds / 1000
        assert len(rl._specs) <= _lock.SPECS_KEPT


def _outcome(make: Callable[..., Any], *args: object, **kwargs: object) -> object:
    """What ``make`` made, or its refusal (the type and the words)."""
    try:
        return make(*args, **kwargs)
    except (TypeError, ValueError) as error:
        return (type(error), str(error))


#: Settings a lock may well have, and values to swap in for some of them in later calls:
#: equal ones of other types (1, 1.0, True), the edges of each check, and no numbers at all.
_BASE = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["a", "b", "é"]),
        "ttl": st.sampled_from([1, 1.0, 10, 0.3]),
        "lock_delay": st.sampled_from([0, 0.0, 1, 1.0]),
        "retry_delay": st.sampled_from([None, 1, 1.0, 0.3]),
        "fencing": st.just(False),
        "limit": st.sampled_from([None, None, 1, 2]),
        "mode": st.sampled_from(["", "", "read", "write"]),
    }
)
_SWAPS = st.one_of(
    st.dictionaries(
        st.sampled_from(["name", "ttl", "lock_delay", "retry_delay", "fencing", "limit"]),
        st.sampled_from(
            [1, 1.0, True, 0, 0.0, -0.0, False, None, 2, 0.3, 1e12, math.inf, math.nan, "1", "", ["b", "a"]]
        ),
        max_size=2,
    ),
    # (the library's own argument: always one of these)
    st.fixed_dictionaries({"mode": st.sampled_from(["", "read", "write"])}),
)
_CLIENTS = {"sync": redlock.Redlock(NOWHERE), "asyncio": redlock.asyncio.Redlock(OTHERS, node_timeout=0.2)}


@settings(max_examples=300, deadline=None)
@given(client=st.sampled_from(sorted(_CLIENTS)), base=_BASE, swaps=st.lists(_SWAPS, max_size=8))
def test_a_cached_spec_is_the_spec_every_check_makes(
    client: str, base: dict[str, Any], swaps: list[dict[str, Any]]
) -> None:
    """Whatever the calls before cached (``base``, then ``base`` with a few values swapped),
    a spec served from the cache is the one the checks make, and an argument they refuse
    is refused alike."""
    rl = _CLIENTS[client]
    rl._specs.clear()
    for swap in [{}, *swaps]:
        arguments = {**base, **swap}
        name, ttl = arguments.pop("name"), arguments.pop("ttl")
        expected = _outcome(rl._checked_spec, name, ttl, **arguments)  # (never cached)
        assert _outcome(rl._lock_spec, name, ttl, **arguments) == expected


# --- the checked options kept for any client (redlock._api.state: LockOptions.checked) --------------


@pytest.mark.parametrize("make", CLIENTS)
@pytest.mark.parametrize(
    ("good", "bad", "error", "named"),
    [
        ({"timeout": 0}, {"timeout": False}, TypeError, "timeout"),
        ({"timeout": 1.0}, {"timeout": True}, TypeError, "timeout"),
        ({"max_attempts": 1}, {"max_attempts": True}, TypeError, "max_attempts"),
        ({"auto_extend": True, "max_hold": 20}, {"auto_extend": True, "max_hold": 5}, ValueError, "max_hold"),
        ({"timeout": 1, "auto_extend": True}, {"timeout": 1, "auto_extend": 1}, TypeError, "auto_extend"),
    ],
)
def test_an_option_equal_to_a_cached_one_is_still_checked(
    make: Any, good: dict[str, Any], bad: dict[str, Any], error: type[Exception], named: str
) -> None:
    rl = make(NOWHERE)
    rl.lock("x", ttl=10, **good)
    rl.lock("y", ttl=10, **good)  # (now from the cache)
    with pytest.raises(error, match=named):
        rl.lock("z", ttl=10, **bad)


@pytest.mark.parametrize("make", CLIENTS)
def test_options_are_checked_against_each_locks_ttl_and_node_timeout(make: Any) -> None:
    """Cached options are those of one ttl and one node_timeout: auto-extension that fits
    a ttl of 1 s after 50 ms rounds does not fit it after 500 ms ones, nor does max_hold=5
    fit a ttl of 10 s."""
    fast, slow = make(NOWHERE, node_timeout=0.05), make(OTHERS, node_timeout=0.5)
    assert fast.lock("x", ttl=1, auto_extend=True, timeout=2).ttl == 1.0
    with pytest.raises(ValueError, match=r"too short to auto-extend in time with node_timeout=0\.5"):
        slow.lock("x", ttl=1, auto_extend=True, timeout=2)
    assert fast.lock("x", ttl=1, auto_extend=True, max_hold=5)._options.max_hold == 5.0
    with pytest.raises(ValueError, match=r"max_hold must be at least the ttl \(10.0 s\)"):
        fast.lock("x", ttl=10, auto_extend=True, max_hold=5)


def test_the_cache_of_checked_options_is_bounded() -> None:
    rl = redlock.Redlock(NOWHERE)
    for milliseconds in range(3 * _lock.OPTIONS_KEPT):
        assert rl.lock("x", timeout=milliseconds / 1000)._options.timeout == milliseconds / 1000
        assert len(_lock._OPTIONS) <= _lock.OPTIONS_KEPT


_OPTION_SPECS = [
    _CLIENTS["sync"]._lock_spec("a", 1),
    _CLIENTS["sync"]._lock_spec("a", 10),
    _CLIENTS["asyncio"]._lock_spec("a", 1),  # (node_timeout 0.2: too short to auto-extend)
]
_OPTION_BASE = st.fixed_dictionaries(
    {
        "timeout": st.sampled_from([None, 0, 0.0, 1, 5.0]),
        "auto_extend": st.booleans(),
        "cancel_on_lost": st.just(False),
        "reentrant": st.booleans(),
        "max_hold": st.sampled_from([None, None, 5, 20.0]),
        "max_attempts": st.sampled_from([None, 1, 3]),
    }
)
_OPTION_SWAPS = st.dictionaries(
    st.sampled_from(["timeout", "auto_extend", "cancel_on_lost", "reentrant", "max_hold", "max_attempts"]),
    st.sampled_from([None, 0, 0.0, 1, 1.0, True, False, 5, 20.0, -1, math.nan, "1"]),
    max_size=2,
)


@settings(max_examples=300, deadline=None)
@given(spec=st.sampled_from(range(len(_OPTION_SPECS))), base=_OPTION_BASE, swaps=st.lists(_OPTION_SWAPS, max_size=8))
def test_cached_options_are_the_options_every_check_makes(
    spec: int, base: dict[str, Any], swaps: list[dict[str, Any]]
) -> None:
    """As for specs: whatever the calls before cached, options served from the cache are
    the ones the checks make, and an argument they refuse is refused alike."""
    _lock._OPTIONS.clear()
    for swap in [{}, *swaps]:
        arguments = {"on_lost": None, "identity": None, **base, **swap}
        expected = _outcome(_lock.LockOptions._checked_anew, _OPTION_SPECS[spec], **arguments)  # (never cached)
        assert _outcome(_lock.LockOptions.checked, _OPTION_SPECS[spec], **arguments) == expected


# --- @rl.locked: a call's arguments bound without inspect.Signature.bind (redlock._api.locked) -----


def _plain(a: int, b: int = 1, c: str = "x") -> None: ...


def _positional_only(a: int, /, b: int = 1) -> None: ...


def _rest(a: int, *rest: int, b: int = 2, **more: int) -> None: ...


_TEMPLATES = {_plain: "n:{a}:{b}:{c}", _positional_only: "n:{a}:{b}", _rest: "n:{a}:{rest}:{b}:{more}"}


@settings(max_examples=300, deadline=None)
@given(
    function=st.sampled_from(list(_TEMPLATES)),
    args=st.lists(st.integers(min_value=0, max_value=9), max_size=4),
    kwargs=st.dictionaries(st.sampled_from(["a", "b", "c", "d", "rest", "more"]), st.integers(0, 9), max_size=3),
)
def test_a_decorated_call_names_its_lock_as_signature_bind_would(
    function: Callable[..., None], args: list[int], kwargs: dict[str, int]
) -> None:
    """The names of a call of a function with plain parameters (bound without
    Signature.bind) or others (bound by it): a call that does not fit raises what
    Signature.bind raises, before any traffic."""
    plan = _locked.LockedCall.planned(
        _CLIENTS["sync"], _TEMPLATES[function], "wait", _locked.NO_DEFAULT, {}, asynchronous=False
    ).bound_to(function)
    assert (plan.plain is not None) == (function is _plain)

    def expected() -> tuple[str, ...]:
        bound = inspect.signature(function).bind(*args, **kwargs)
        bound.apply_defaults()
        return (_TEMPLATES[function].format_map(bound.arguments),)

    assert _outcome(plan.names, args, kwargs) == _outcome(expected)
