"""The connection policy (redlock._protocol.connection) without sockets: stateful and property tests.

A model master executes, in order, whatever the policy tells a driver to write, and answers
in order; the policy must keep every command a round submitted in submission order on the
wire, match each reply to the round that asked, never record a master twice in a round,
and drop nothing silently when a connection fails.
"""

from __future__ import annotations

import hiredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from redlock._protocol import scripts as _scripts
from redlock._protocol.config import Credentials
from redlock._protocol.connection import (
    MAX_IN_FLIGHT,
    RECONNECT_BACKOFF_MAX,
    Connect,
    Connections,
    ProtocolViolation,
    Write,
    encode,
    reply_parser,
)
from redlock._protocol.core import Command, ErrorReply, Round
from redlock.exceptions import NodeStatus

NAMES = ("m0", "m1", "m2")


def _round(tag: int, *, cleanup: bool = False, targets: tuple[int, ...] = (0,)) -> Round:
    return Round(
        command=Command(("SET", f"k{tag}", "t", "NX", "PX", 1000)),
        targets=targets,
        node_names=NAMES,
        quorum=2,
        timeout=0.05,
        wait_for_all=cleanup,
        cleanup=cleanup,
    )


#: COMMAND INFO's answer from a master without DELIFEQ and DELEX.
_NO_NATIVE = b"*2\r\n*-1\r\n*-1\r\n"


def _commands(data: bytes) -> list[list[bytes]]:
    """What a master reads from ``data``: the commands, in order."""
    reader = hiredis.Reader()
    reader.feed(data)
    commands = []
    while (command := reader.gets()) is not False:
        commands.append(command)
    return commands


def _policy(**credentials: object) -> Connections:
    return Connections(
        NAMES,
        [Credentials(**credentials)] * 3,
        node_timeout=0.05,
        connect_timeout=1.0,  # type: ignore[arg-type]
    )


def test_a_first_round_connects_and_the_handshake_goes_first() -> None:
    policy = _policy(password="pw", db=2)
    first = policy.submit(_round(1), 0, 0.0)
    assert isinstance(first, Connect)
    assert policy.submit(_round(2), 0, 0.0) is None  # queued behind the connect
    opening = policy.connected(first, None, 0.001)
    assert isinstance(opening, Write)
    commands = _commands(opening.data)
    assert commands[0] == [b"AUTH", b"pw"]
    assert commands[1] == [b"SELECT", b"2"]
    assert commands[2] == [b"INFO"]  # what the master says about itself
    assert commands[3] == [b"COMMAND", b"INFO", b"DELIFEQ", b"DELEX"]  # which native commands it has
    assert [c[0] for c in commands[4 : 4 + len(_scripts.ALL)]] == [b"SCRIPT"] * len(_scripts.ALL)
    assert [c[1] for c in commands[-2:]] == [b"k1", b"k2"]  # the queue, in order


def test_a_refused_password_makes_every_waiting_round_misconfigured_and_backs_off() -> None:
    policy = _policy(password="wrong")
    rounds = [_round(i) for i in range(3)]
    connect = policy.submit(rounds[0], 0, 0.0)
    assert isinstance(connect, Connect)
    for round_ in rounds[1:]:
        policy.submit(round_, 0, 0.0)
    assert policy.connected(connect, None, 0.0) is not None
    parser = reply_parser()
    parser.feed(b"-WRONGPASS invalid username-password pair\r\n")
    outcome = policy.received("command", 0, parser, 0.01)
    assert outcome.hang_up
    for round_ in rounds:
        assert round_.outcomes[0].status is NodeStatus.MISCONFIGURED
    later = _round(9)
    assert policy.submit(later, 0, 0.02) is None  # backing off: told at once, nothing sent
    assert later.outcomes[0].status is NodeStatus.MISCONFIGURED
    cleanup = _round(10, cleanup=True)
    assert isinstance(policy.submit(cleanup, 0, 0.02), Connect)  # a clean-up tries anyway


def test_a_reply_nobody_asked_for_and_bytes_that_are_not_resp_lose_the_connection() -> None:
    policy = _policy()
    connect = policy.submit(_round(1), 0, 0.0)
    assert isinstance(connect, Connect)
    policy.connected(connect, None, 0.0)
    parser = reply_parser()
    parser.feed(b"?what\r\n")
    assert isinstance(policy.received("command", 0, parser, 0.0).failure, ProtocolViolation)


def test_a_hung_master_is_skipped_but_a_clean_up_still_goes() -> None:
    policy = _policy()
    connect = policy.submit(_round(0), 0, 0.0)
    assert isinstance(connect, Connect)
    policy.connected(connect, None, 0.0)
    assert isinstance(policy.submit(_round(1), 0, 0.0), Write)
    hung = _round(2)
    assert policy.submit(hung, 0, 5.0) is None  # its oldest reply is 5 s overdue
    assert hung.outcomes[0].status is NodeStatus.TIMEOUT
    cleanup = _round(3, cleanup=True)
    assert isinstance(policy.submit(cleanup, 0, 5.0), Write)  # still sent: it takes our key back
    assert cleanup.outcomes[0].status is NodeStatus.TIMEOUT  # but nobody waits for the answer
    assert cleanup.settled


def test_a_round_waits_for_connects_only_while_it_cannot_be_decided() -> None:
    policy = _policy()
    round_ = _round(1, targets=(0, 1, 2))
    for node in range(3):
        assert isinstance(policy.submit(round_, node, 0.0), Connect)
    # Nothing connected at the deadline: wait for the connects (1 s) plus the round's timeout.
    assert policy.overtime(round_, 0.05) == 1.0 + 0.05
    round_.record(0, NodeStatus.GRANTED)
    round_.record(1, NodeStatus.GRANTED)
    assert policy.overtime(round_, 0.05) is None  # decided without the third


@given(st.integers(min_value=1, max_value=MAX_IN_FLIGHT // 1000))
def test_encode_is_what_redis_reads(n: int) -> None:
    args = ["EVALSHA", "x" * n, 2, b"\x00\xff", "é"]
    assert _commands(encode(args)) == [[b"EVALSHA", b"x" * n, b"2", b"\x00\xff", "é".encode()]]


class OneMaster(RuleBasedStateMachine):
    """Rounds submitted to one master in any interleaving with connects, replies and losses.

    The model master executes what was written, in order, and answers each command with a
    reply naming it, so every recorded reply can be checked against the round that sent it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.policy = _policy()
        self.now = 0.0
        self.tag = 0
        self.connect: Connect | None = None
        self.connected = False
        #: Commands the master has received and not answered yet (in order).
        self.unanswered: list[list[bytes]] = []
        #: Every key submitted, in submission order, and every key written, in write order.
        self.submitted: list[bytes] = []
        self.written: list[bytes] = []
        self.rounds: list[Round] = []

    def _carry_out(self, action: Write | Connect | None) -> None:
        if isinstance(action, Connect):
            self.connect = action
        elif isinstance(action, Write):
            assert self.connected, "a write on a connection that is not up"
            for command in _commands(action.data):
                self.unanswered.append(command)
                if command[0] == b"SET":
                    self.written.append(command[1])

    @rule(cleanup=st.booleans())
    def submit(self, cleanup: bool) -> None:
        self.tag += 1
        round_ = _round(self.tag, cleanup=cleanup)
        self.rounds.append(round_)
        action = self.policy.submit(round_, 0, self.now)
        if action is not None or 0 not in round_.outcomes:
            self.submitted.append(f"k{self.tag}".encode())
        self._carry_out(action)

    @precondition(lambda self: self.connect is not None)
    @rule(fails=st.booleans())
    def finish_connect(self, fails: bool) -> None:
        connect, self.connect = self.connect, None
        assert connect is not None
        if not self.policy.is_current(connect):
            return
        self.connected = not fails
        self.unanswered.clear()
        self._carry_out(self.policy.connected(connect, ConnectionRefusedError() if fails else None, self.now))

    @precondition(lambda self: self.connected and self.unanswered)
    @rule(count=st.integers(min_value=1, max_value=5), noscript=st.booleans())
    def answer(self, count: int, noscript: bool) -> None:
        parser = reply_parser()
        for command in self.unanswered[:count]:
            if command[0] == b"SET":
                parser.feed(b"+OK\r\n")
            elif command[0] == b"EVALSHA" and noscript:
                parser.feed(b"-NOSCRIPT No matching script\r\n")
            else:
                parser.feed(b":1\r\n")
        del self.unanswered[:count]
        outcome = self.policy.received("command", 0, parser, self.now)
        assert outcome.failure is None
        if outcome.write:
            self._carry_out(Write("command", 0, outcome.write))

    @precondition(lambda self: self.connected)
    @rule()
    def lose_connection(self) -> None:
        self.connected = False
        self.unanswered.clear()
        self.policy.lost("command", 0, ConnectionResetError(), self.now)

    @rule(seconds=st.floats(min_value=0.0, max_value=2.0))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @invariant()
    def written_in_submission_order(self) -> None:
        # What reaches the master is a subsequence of what was submitted, in the same order:
        # nothing overtakes what was submitted before it (the per-master order guarantee).
        position = 0
        for key in self.written:
            assert key in self.submitted[position:], f"{key!r} reached the master out of order"
            position = self.submitted.index(key, position) + 1

    @invariant()
    def a_granted_round_was_answered_by_its_own_command(self) -> None:
        for round_ in self.rounds:
            outcome = round_.outcomes.get(0)
            if outcome is not None and outcome.status is NodeStatus.GRANTED:
                assert round_.replies[0] == b"OK"

    @invariant()
    def what_is_owed_matches_what_the_master_holds(self) -> None:
        link = self.policy.links[0]
        if self.connected:
            assert len(link.in_flight) == len(self.unanswered)


TestOneMaster = OneMaster.TestCase
TestOneMaster.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)


def test_noscript_is_resent_in_full_for_the_round_that_asked() -> None:
    policy = _policy()
    script = Command.run_script(_scripts.RELEASE, ["k"], ["t"])
    round_ = Round(command=script, targets=(0,), node_names=NAMES, quorum=2, timeout=0.05)
    connect = policy.submit(round_, 0, 0.0)
    assert isinstance(connect, Connect)
    policy.connected(connect, None, 0.0)
    parser = reply_parser()
    parser.feed(b"$0\r\n\r\n" + _NO_NATIVE + b"+OK\r\n" * len(_scripts.ALL) + b"-NOSCRIPT No matching script\r\n")
    outcome = policy.received("command", 0, parser, 0.0)
    assert _commands(outcome.write) == [[b"EVAL", _scripts.RELEASE.source.encode(), b"1", b"k", b"t"]]
    assert round_.pending == (0,)
    parser.feed(b":1\r\n")
    policy.received("command", 0, parser, 0.0)
    assert round_.outcomes[0].status is NodeStatus.GRANTED
    assert isinstance(ErrorReply("NOSCRIPT x"), Exception)


_INFO = (
    b"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.0.1\r\nredis_mode:standalone\r\n"
    b"run_id:abc123\r\n\r\n# Replication\r\nrole:master\r\nconnected_slaves:1\r\n\r\n# Memory\r\n"
    b"maxmemory:1048576\r\nmaxmemory_policy:volatile-lru\r\n\r\n# Persistence\r\naof_enabled:1\r\n"
)


def _bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def _handshake_to(policy: Connections, node: int, now: float = 0.0) -> None:
    connect = policy.submit(_round(1), node, now)
    assert isinstance(connect, Connect)
    policy.connected(connect, None, now)


def test_what_a_master_says_at_connect_is_kept_per_master_for_the_connection() -> None:
    policy = _policy()
    _handshake_to(policy, 0)
    assert policy.facts()[0].answered is False  # nothing said yet: unknown
    parser = reply_parser()
    parser.feed(_bulk(_INFO))
    policy.received("command", 0, parser, 0.0)
    facts = policy.facts()[0]
    assert (facts.server, facts.version, facts.run_id, facts.mode, facts.role) == (
        "valkey",
        (9, 0, 1),
        "abc123",
        "standalone",
        "master",
    )
    assert (facts.connected_replicas, facts.maxmemory, facts.maxmemory_policy, facts.aof_enabled) == (
        1,
        1048576,
        "volatile-lru",
        True,
    )
    assert policy.facts()[1].answered is False  # per master
    policy.lost("command", 0, ConnectionResetError(), 0.1)
    _handshake_to(policy, 0, now=5.0)  # (after the back-off of a connection lost mid-handshake)
    assert policy.facts()[0].answered is False  # a new connection learns anew


def test_a_master_that_will_not_say_still_serves_and_its_facts_stay_unknown() -> None:
    policy = _policy(password="pw")
    round_ = _round(1)
    connect = policy.submit(round_, 0, 0.0)
    assert isinstance(connect, Connect)
    policy.connected(connect, None, 0.0)
    parser = reply_parser()
    parser.feed(b"+OK\r\n-NOPERM this user has no permissions to run the 'info' command\r\n")
    parser.feed(_NO_NATIVE + b"+OK\r\n" * len(_scripts.ALL) + b"+OK\r\n")
    outcome = policy.received("command", 0, parser, 0.0)
    assert not outcome.hang_up
    assert outcome.failure is None
    assert round_.outcomes[0].status is NodeStatus.GRANTED
    assert policy.facts()[0].answered is False


def test_a_master_that_refuses_a_thousand_clean_ups_in_a_row_backs_off_no_longer_than_the_cap() -> None:
    # Clean-ups connect whatever the back-off, so failures can pile up far beyond what the
    # doubling needs; 2.0**1024 once overflowed.
    policy = _policy(password="wrong")
    for attempt in range(1100):
        now = float(attempt)
        connect = policy.submit(_round(attempt, cleanup=True), 0, now)
        assert isinstance(connect, Connect)
        policy.connected(connect, None, now)
        parser = reply_parser()
        parser.feed(b"-WRONGPASS invalid username-password pair\r\n")
        assert policy.received("command", 0, parser, now).hang_up
    link = policy.links[0]
    assert link.failures == 1100
    assert link.retry_at - 1099.0 == RECONNECT_BACKOFF_MAX


@pytest.mark.parametrize(
    "reply",
    [
        b"-READONLY You can't write against a read only replica.",
        b"-MOVED 3999 127.0.0.1:6381",
        b"-ASK 3999 127.0.0.1:6381",
        b"-CROSSSLOT Keys in request don't hash to the same slot",
        b"-CLUSTERDOWN Hash slot not served",
    ],
)
def test_a_replica_or_cluster_node_answering_a_round_is_misconfigured_not_down(reply: bytes) -> None:
    policy = _policy()
    round_ = _round(1)
    connect = policy.submit(round_, 0, 0.0)
    assert isinstance(connect, Connect)
    policy.connected(connect, None, 0.0)
    parser = reply_parser()
    parser.feed(_bulk(_INFO.replace(b"connected_slaves:1", b"connected_slaves:0")))
    parser.feed(_NO_NATIVE + b"+OK\r\n" * len(_scripts.ALL) + reply + b"\r\n")
    outcome = policy.received("command", 0, parser, 0.0)
    assert not outcome.hang_up  # the connection is fine: the server is what it is
    assert round_.outcomes[0].status is NodeStatus.MISCONFIGURED
    assert round_.outcomes[0].detail == reply[1:].decode()
    assert isinstance(policy.submit(_round(2), 0, 0.1), Write)  # asked again: it may have changed


def test_our_own_interruption_mid_handshake_is_no_news_about_the_master(caplog: pytest.LogCaptureFixture) -> None:
    # Ctrl-C (or the CLI's SIGTERM handler) while the first connection's handshake is read:
    # the connection starts over, the round learns the master did not answer, and nothing
    # tells the operator the master is unreachable (it was us).
    from redlock._protocol.connection import Interrupted  # noqa: PLC0415

    policy = _policy()
    first = policy.submit(_round(1), 0, 0.0)
    assert isinstance(first, Connect)
    policy.connected(first, None, 0.001)
    with caplog.at_level("WARNING", logger="redlock"):
        policy.lost("command", 0, Interrupted("interrupted mid-read: KeyboardInterrupt()"), 0.002)
    assert not [record for record in caplog.records if "unreachable" in record.getMessage()]
    # The same loss by the master's doing is told.
    second = policy.submit(_round(2), 0, 10.0)
    assert isinstance(second, Connect)
    policy.connected(second, None, 10.001)
    with caplog.at_level("WARNING", logger="redlock"):
        policy.lost("command", 0, ConnectionResetError("reset by peer"), 10.002)
    assert [record for record in caplog.records if "unreachable" in record.getMessage()]
