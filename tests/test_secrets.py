"""Passwords stay secret wherever credentials travel.

Credentials ride in objects that get printed and logged: the client's masters, its repr,
every error about a master, log records, telemetry. None of them may show a password, with
the right one (every operation succeeds) or a wrong one (every master refuses it).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

import redlock
import redlock.asyncio
from redlock import MasterMisconfigured
from redlock._protocol.config import Credentials
from redlock.servers import LocalMasters

from .conftest import ACL_PASSWORD, ClientFactory, unique
from .test_telemetry import Telemetry

WRONG = "not-the-password-4711"


def test_credentials_show_no_password() -> None:
    shown = Credentials(username="user", password="hunter2", db=3, client_name="app")
    for text in (repr(shown), str(shown)):
        assert "hunter2" not in text
        assert "user" in text  # the rest stays readable
    assert "password" not in repr(Credentials())  # none given: nothing to hide either


def _everything_said(client: Any, caplog: pytest.LogCaptureFixture, telemetry: Telemetry, *errors: Any) -> str:
    """Every text a user or an operator may see of this client's work, joined."""
    inner = getattr(client, "inner", client)
    texts = [repr(inner), str(inner), repr(inner.masters), *map(repr, inner.masters)]
    for error in errors:
        texts += [str(error), repr(error), repr(getattr(error, "outcomes", ()))]
    texts += [record.getMessage() for record in caplog.records]
    texts += [repr(record.args) for record in caplog.records]
    redlock._api.telemetry.flush()
    for name in ("redlock.acquire", "redlock.release"):
        for span in telemetry.spans(name):
            texts.append(repr(dict(span.attributes or {})))
            texts += [repr(dict(event.attributes or {})) for event in span.events]
    for metric in telemetry.metrics().values():
        texts += [repr(dict(point.attributes)) for point in metric.data.data_points]
    return "\n".join(texts)


@pytest.fixture
def otel() -> Any:
    telemetry = Telemetry()
    yield telemetry
    telemetry.shutdown()


def test_a_right_password_is_never_shown(
    client: ClientFactory, acl_masters: LocalMasters, caplog: pytest.LogCaptureFixture, otel: Telemetry
) -> None:
    caplog.set_level(logging.DEBUG, logger="redlock")
    rl = client(acl_masters.urls, **otel.providers)
    lock = rl.lock(unique(), ttl=10.0)
    assert lock.acquire(blocking=False)
    lock.extend()
    info = rl.inspect(lock.name)
    lock.release()
    said = _everything_said(rl, caplog, otel) + repr(info)
    assert ACL_PASSWORD in acl_masters.urls[0]  # (the URLs do carry it)
    assert ACL_PASSWORD not in said


def test_a_wrong_password_is_never_shown(
    client: ClientFactory, acl_masters: LocalMasters, caplog: pytest.LogCaptureFixture, otel: Telemetry
) -> None:
    caplog.set_level(logging.DEBUG, logger="redlock")
    rl = client([master.url_as(password=WRONG) for master in acl_masters], **otel.providers)
    with pytest.raises(MasterMisconfigured) as refused:
        rl.lock(unique(), ttl=10.0).acquire(blocking=False)
    said = _everything_said(rl, caplog, otel, refused.value)
    assert "WRONGPASS" in said or "invalid" in said  # the refusal itself is shown
    assert WRONG not in said


@pytest.mark.parametrize(
    "url",
    [
        f"redis://:{WRONG}@127.0.0.1:notaport",
        f"redis://user:{WRONG}@",
        f"redis://:{WRONG}@127.0.0.1:6379/1x",
        f"redis://:{WRONG}#x@127.0.0.1:6379",  # a # its writer forgot to encode: the "port" is the password
        f"redis://:{WRONG}/x@127.0.0.1:6379",  # a / likewise
        f"redis://:{WRONG}@127.0.0.1:6379?bogus=1",
        f"127.0.0.1:{WRONG}@6379",  # no scheme
        f"redis://127.0.0.1:6379?password={WRONG}&db=x",
    ],
)
def test_a_malformed_url_is_refused_without_showing_its_password(url: str) -> None:
    for api in (redlock.Redlock, redlock.asyncio.Redlock):
        with pytest.raises(ValueError, match=r"^masters\[0\]") as refused:
            api([url])
        assert WRONG not in str(refused.value)
