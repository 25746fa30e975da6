"""The sync and asyncio APIs are alike: the same public names, members, parameters, defaults
and documentation, but for the differences listed here by name, each with its reason.

A difference that is not listed fails (a parameter added to one client only, a default
changed on one side, a method documented on one side only); so does a listed one that is
gone, so that the lists say what differs today. Pure: no master is started.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import redlock
import redlock.asyncio
from redlock._api import exports as _exports
from redlock._api import options as _options

#: Exported by ``redlock`` only.
ONLY_SYNC_EXPORTS = {
    "compiled": "a fact of the installed package (its core compiled or not), not of a client",
    "quorum_size": "arithmetic, the same for both clients, importable once from redlock",
    "semaphore_quorum": "arithmetic, the same for both clients, importable once from redlock",
    "validity_left": "arithmetic, the same for both clients, importable once from redlock",
}

#: The classes each client has its own of: the same name, another object.
TWINS = ("Redlock", "Lock", "Semaphore", "ReadWriteLock", "Election")

#: Public members one side has and the other has not: (class, member) -> why.
ONE_SIDED_MEMBERS = {
    ("Redlock", "close"): "sync only: the asyncio client closes with await aclose()",
    ("Redlock", "aclose"): "asyncio only: closing awaits the connections (redis.asyncio's name for it)",
}

#: Parameters the asyncio side takes only: (class, member, parameter) -> why.
ASYNC_ONLY_PARAMETERS = {
    (twin, member, "cancel_on_lost"): "a loss cancels the task of the async with body; a thread cannot be cancelled"
    for twin, member in (("Redlock", "lock"), ("Redlock", "semaphore"), ("Redlock", "rwlock"), ("Redlock", "election"))
}

#: Return types that differ because the asyncio side is awaited: (class, member) -> why.
AWAITED_RETURNS = {
    ("Redlock", "locked"): "the asyncio decorator takes coroutine functions and returns one",
    ("Election", "observe"): "an async iterator (async for) where the sync one is an iterator",
}

#: The methods compared beside the public ones: how each class is made.
CONSTRUCTORS = ("__init__",)


def _twins(name: str) -> tuple[type, type]:
    return getattr(redlock, name), getattr(redlock.asyncio, name)


def _members(cls: type) -> set[str]:
    """Public methods and properties of ``cls`` and its bases in this package."""
    return {
        member
        for klass in cls.__mro__
        if klass.__module__.startswith("redlock")
        for member, value in vars(klass).items()
        if not member.startswith("_") and (inspect.isfunction(value) or isinstance(value, property | classmethod))
    }


def _compared_members() -> list[tuple[str, str]]:
    return sorted(
        (name, member)
        for name in TWINS
        for member in (_members(_twins(name)[0]) & _members(_twins(name)[1])) | set(CONSTRUCTORS)
        if not isinstance(inspect.getattr_static(_twins(name)[0], member), classmethod)
    )


def test_both_clients_export_the_same_names() -> None:
    sync, asyncio = set(redlock.__all__), set(redlock.asyncio.__all__)
    assert sync - asyncio == set(ONLY_SYNC_EXPORTS)
    assert asyncio - sync == set()
    assert len(redlock.__all__) == len(sync), "a name twice"
    assert len(redlock.asyncio.__all__) == len(asyncio), "a name twice"


def test_the_names_they_share_are_one_object_but_the_clients_own_classes() -> None:
    shared = set(redlock.__all__) & set(redlock.asyncio.__all__)
    assert shared - set(_exports.__all__) == set(TWINS)
    for name in sorted(shared):
        same = getattr(redlock, name) is getattr(redlock.asyncio, name)
        assert same is (name not in TWINS), name


@pytest.mark.parametrize("name", TWINS)
def test_each_class_has_the_same_public_members(name: str) -> None:
    sync, asyncio = (_members(cls) for cls in _twins(name))
    assert {(name, member) for member in sync - asyncio} == {
        listed for listed in ONE_SIDED_MEMBERS if listed[0] == name and listed[1] in sync
    }
    assert {(name, member) for member in asyncio - sync} == {
        listed for listed in ONE_SIDED_MEMBERS if listed[0] == name and listed[1] in asyncio
    }


@pytest.mark.parametrize("name", TWINS)
def test_what_sync_uses_with_with_asyncio_uses_with_async_with(name: str) -> None:
    sync, asyncio = _twins(name)
    assert hasattr(sync, "__enter__") == hasattr(asyncio, "__aenter__")


@pytest.mark.parametrize(("name", "member"), _compared_members())
def test_each_method_takes_the_same_parameters_with_the_same_defaults(name: str, member: str) -> None:
    sync, asyncio = (inspect.getattr_static(cls, member) for cls in _twins(name))
    if isinstance(sync, property):
        assert isinstance(asyncio, property), f"{name}.{member}: a property on one side only"
        return
    sync_signature, asyncio_signature = inspect.signature(sync), inspect.signature(asyncio)
    extra = [
        parameter
        for parameter in asyncio_signature.parameters
        if (name, member, parameter) in ASYNC_ONLY_PARAMETERS and parameter not in sync_signature.parameters
    ]
    asyncio_parameters = [asyncio_signature.parameters[p] for p in asyncio_signature.parameters if p not in extra]
    assert [_described(p) for p in asyncio_parameters] == [_described(p) for p in sync_signature.parameters.values()]
    if (name, member) not in AWAITED_RETURNS:
        assert asyncio_signature.return_annotation == sync_signature.return_annotation


def _described(parameter: inspect.Parameter) -> tuple[str, Any, str, str]:
    """A parameter as a caller meets it: name, kind, default (a callable one by its name)
    and annotation."""
    default = parameter.default
    shown = f"{default.__module__}.{default.__qualname__}" if callable(default) else repr(default)
    return parameter.name, parameter.kind, shown, str(parameter.annotation)


@pytest.mark.parametrize(("name", "member"), [(name, None) for name in TWINS] + _compared_members())
def test_each_member_is_documented_alike(name: str, member: str | None) -> None:
    """Documented on both sides or on neither; the asyncio side's docstring is the sync
    one's, or refers to it by name (``See :meth:`redlock.Lock.acquire```), adding what only
    the asyncio client does."""
    if member == "__init__":
        return  # (made by a factory, or documented by the class: never shown on its own)
    sync, asyncio = (cls if member is None else inspect.getattr_static(cls, member) for cls in _twins(name))
    sync_doc, asyncio_doc = inspect.getdoc(sync), inspect.getdoc(asyncio)
    assert bool(sync_doc) == bool(asyncio_doc), f"{name}.{member}: documented on one side only"
    if sync_doc is None:
        return  # (undocumented alike: Lock.ttl, Redlock.master_names)
    defined_as = name if member is None else getattr(sync, "__qualname__", f"{name}.{member}")
    assert asyncio_doc == sync_doc or f"redlock.{defined_as}" in asyncio_doc, (
        f"{name}.{member}: the asyncio docstring neither is the sync one nor refers to redlock.{defined_as}"
    )


def test_every_listed_difference_is_still_there() -> None:
    for export in ONLY_SYNC_EXPORTS:
        assert export in redlock.__all__, export
        assert export not in redlock.asyncio.__all__, export
    for name, member in ONE_SIDED_MEMBERS:
        sync, asyncio = (_members(cls) for cls in _twins(name))
        assert (member in sync) != (member in asyncio), (name, member)
    for name, member, parameter in ASYNC_ONLY_PARAMETERS:
        sync, asyncio = (inspect.signature(getattr(cls, member)).parameters for cls in _twins(name))
        assert parameter in asyncio, (name, member, parameter)
        assert parameter not in sync, (name, member, parameter)
    for name, member in AWAITED_RETURNS:
        sync, asyncio = (inspect.signature(getattr(cls, member)).return_annotation for cls in _twins(name))
        assert sync != asyncio, (name, member)


# --- the options of the lock factories: one definition (redlock._api.options) ---------------------

FACTORIES = [
    (client, factory, keywords)
    for factory, keywords_of_each in (
        ("lock", (_options.LockKeywords, _options.AsyncLockKeywords)),
        ("semaphore", (_options.SemaphoreKeywords, _options.AsyncSemaphoreKeywords)),
        ("rwlock", (_options.ReadWriteKeywords, _options.AsyncReadWriteKeywords)),
    )
    for client, keywords in zip((redlock.Redlock, redlock.asyncio.Redlock), keywords_of_each, strict=True)
]


def test_every_option_has_one_default() -> None:
    declared = {name for _, _, keywords in FACTORIES for name in _options.keywords_of(keywords)}
    assert set(_options.DEFAULTS) == declared


@pytest.mark.parametrize(("client", "factory", "keywords"), FACTORIES)
def test_a_factory_shows_its_options_as_keyword_parameters_with_their_defaults(
    client: type, factory: str, keywords: type
) -> None:
    shown = {
        name: parameter.default
        for name, parameter in inspect.signature(getattr(client, factory)).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert list(shown) == list(_options.keywords_of(keywords))
    assert shown == {name: _options.DEFAULTS[name] for name in shown}


@pytest.mark.parametrize(("client", "factory", "keywords"), FACTORIES)
def test_a_factory_refuses_a_keyword_it_does_not_take_as_python_would(
    client: type, factory: str, keywords: type
) -> None:
    unconnected = client.__new__(client)  # (the keywords are checked before anything else)
    arguments = ("name", 2) if factory == "semaphore" else ("name",)
    with pytest.raises(TypeError, match=rf"^Redlock\.{factory}\(\) got an unexpected keyword argument 'nope'$"):
        getattr(unconnected, factory)(*arguments, timeout=1.0, nope=True)


def test_a_factory_whose_annotation_names_other_keywords_is_refused_at_import() -> None:
    def lock(self: object, name: str, **options: Any) -> None:
        raise AssertionError("never called")

    with pytest.raises(TypeError, match=r"\*\*options: Unpack\[LockKeywords\[Lock\]\]"):
        _options.takes(_options.LockKeywords, "Lock")(lock)
