"""Native commands (DELIFEQ, DELEX, SET IFEQ) in place of the lock's scripts, where masters have them.

First without sockets: which commands a master has by what it said, which form each master
is sent, what waits for the handshake to say, the fall back to scripts when a master refuses
a native command, and a model master under every interleaving of connects, losses and
refusals, whose lock must never carry an extend older than one the client counts there.
Then on real servers: Valkey 9 (which has DELIFEQ and SET IFEQ) next to Redis 6.2 and 7.0
(which have neither), checked by what the masters counted (INFO commandstats).
"""

from __future__ import annotations

import threading
import time

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from redlock._protocol import scripts as _scripts
from redlock._protocol.config import Credentials
from redlock._protocol.connection import (
    NEEDS_SCRIPTING,
    NO_SCRIPTING_NOR_NATIVE,
    Connect,
    Connections,
    Write,
    reply_parser,
)
from redlock._protocol.core import DELEX, DELIFEQ, SET_IFEQ, Command, Round, native_form
from redlock._protocol.facts import MasterFacts, native_commands, releases_natively, with_commands
from redlock._protocol.kinds import FENCED, PLAIN, MultiLock, Semaphore
from redlock.exceptions import MasterMisconfigured, NodeStatus
from redlock.servers import AclUser, LocalMasters, server_version

from .conftest import ClientFactory, MastersFactory, _binary_of, eventually, parked, unique
from .test_connection_policy import _commands

NAMES = ("m0", "m1", "m2")

# --- which native commands a master has -----------------------------------------------------


@pytest.mark.parametrize(
    ("server", "version", "expected"),
    [
        ("valkey", (9, 1, 2), {DELIFEQ, SET_IFEQ}),
        ("valkey", (9, 0), {DELIFEQ, SET_IFEQ}),
        ("valkey", (8, 1, 4), {SET_IFEQ}),
        ("valkey", (8, 0, 2), set()),
        ("redis", (8, 4, 0), {DELEX, SET_IFEQ}),
        ("redis", (8, 2, 1), set()),
        ("redis", (7, 2, 4), set()),  # (what Valkey says as its redis_version, too)
        (None, None, set()),  # INFO denied: nothing is guessed
    ],
)
def test_without_command_info_the_version_decides(
    server: str | None, version: tuple[int, ...] | None, expected: set[str]
) -> None:
    assert native_commands(MasterFacts(server=server, version=version)) == expected


def test_command_info_outranks_the_version() -> None:
    valkey9 = MasterFacts(server="valkey", version=(9, 0, 0))
    nil_nil = [None, None]
    # Renamed away in the master's configuration: the command table does not have it.
    assert native_commands(with_commands(valkey9, nil_nil)) == {SET_IFEQ}  # (8.1's option stays)
    # A master that says DELEX but no version (INFO denied) gets the SET IFEQ that came with it.
    assert native_commands(with_commands(MasterFacts(), [None, [b"delex", -2]])) == {DELEX, SET_IFEQ}
    assert native_commands(with_commands(MasterFacts(), [[b"delifeq", 3], [b"delex", -2]])) == {
        DELIFEQ,
        DELEX,
        SET_IFEQ,
    }
    assert native_commands(with_commands(MasterFacts(), nil_nil)) == set()


@pytest.mark.parametrize("reply", [b"OK", 1, [None], [None, None, None], None])
def test_an_answer_that_is_not_one_changes_nothing(reply: object) -> None:
    facts = MasterFacts(server="valkey", version=(9, 0))
    assert with_commands(facts, reply) is facts


def test_only_a_delete_and_set_ifeq_together_serve_without_scripts() -> None:
    assert releases_natively(frozenset({DELIFEQ, SET_IFEQ}))
    assert releases_natively(frozenset({DELEX, SET_IFEQ}))
    assert not releases_natively(frozenset({SET_IFEQ}))  # Valkey 8.1: extends, but cannot release
    assert not releases_natively(frozenset({DELIFEQ}))
    assert not releases_natively(frozenset())


# --- which form each command has ------------------------------------------------------------------


def test_a_lock_on_one_name_extends_and_releases_natively() -> None:
    for kind in (PLAIN, FENCED):  # (a fenced lock releases and extends as a plain one)
        extend = kind.extend("k", "tok", 1500, 7)
        assert extend.script is _scripts.EXTEND
        (form,) = extend.native
        assert (form.needs, form.then) == (SET_IFEQ, None)
        assert form.command.args == ("SET", "k", "tok", "IFEQ", "tok", "PX", 1500)
        assert form.command.idempotent
        assert form.command.is_native
        assert not extend.is_native

        release = kind.release("k", "tok", notify=True)
        delifeq, delex = release.native
        assert (delifeq.needs, delifeq.command.args) == (DELIFEQ, ("DELIFEQ", "k", "tok"))
        assert (delex.needs, delex.command.args) == (DELEX, ("DELEX", "k", "IFEQ", "tok"))
        assert delifeq.then is not None
        assert delifeq.then.args == ("PUBLISH", "redlock:released:k", "tok")
        assert delifeq.command.removes_token
        assert delifeq.command.idempotent

        rollback = kind.release("k", "tok", notify=False)
        assert all(form.then is None for form in rollback.native)  # a rollback announces nothing
    assert PLAIN.acquire("k", "tok", 1500).native == ()


def test_what_needs_lua_has_no_native_form() -> None:
    multi = MultiLock(("a", "b"))
    semaphore = Semaphore(3)
    commands = [
        FENCED.acquire("k", "t", 1000),
        FENCED.raise_fence("k", 5),
        multi.acquire("a", "t", 1000),
        multi.extend("a", "t", 1000, 1),
        multi.release("a", "t", notify=True),
        semaphore.acquire("k", "t", 1000),
        semaphore.extend("k", "t", 1000, 1),
        semaphore.release("k", "t", notify=True),
    ]
    assert all(command.native == () and command.script is not None for command in commands)


def test_the_first_form_the_master_has_is_chosen() -> None:
    release = PLAIN.release("k", "t", notify=False)
    assert native_form(release, frozenset()) is None
    assert native_form(release, frozenset({SET_IFEQ})) is None
    chosen = native_form(release, frozenset({DELEX, DELIFEQ, SET_IFEQ}))
    assert chosen is not None
    assert chosen.needs == DELIFEQ
    chosen = native_form(release, frozenset({DELEX, SET_IFEQ}))
    assert chosen is not None
    assert chosen.needs == DELEX


# --- the connection policy, without sockets ------------------------------------------------------

#: A Valkey 9 master's answers to the handshake: INFO, COMMAND INFO, SCRIPT LOAD.
_INFO = b"server_name:valkey\r\nvalkey_version:9.0.0\r\nrun_id:x"
_INFO_VALKEY = b"$%d\r\n%s\r\n" % (len(_INFO), _INFO)
_HAS_DELIFEQ = b"*2\r\n*2\r\n$7\r\ndelifeq\r\n:3\r\n*-1\r\n"
_HAS_NONE = b"*2\r\n*-1\r\n*-1\r\n"
_SCRIPTS_LOADED = b"$40\r\n" + b"0" * 40 + b"\r\n"
_NOPERM_SCRIPT = b"-NOPERM User u has no permissions to run the 'script|load' command\r\n"


def _policy() -> Connections:
    return Connections(NAMES, [Credentials()] * 3, node_timeout=0.05, connect_timeout=1.0)


def _round(command: Command, *, cleanup: bool = False) -> Round:
    return Round(
        command=command,
        targets=(0,),
        node_names=NAMES,
        quorum=2,
        timeout=0.05,
        wait_for_all=cleanup,
        cleanup=cleanup,
    )


def _feed(policy: Connections, data: bytes, now: float = 0.0) -> list[list[bytes]]:
    """Hand master 0's replies to the policy; the commands it writes back."""
    parser = reply_parser()
    parser.feed(data)
    outcome = policy.received("command", 0, parser, now)
    assert outcome.failure is None
    return _commands(outcome.write)


def _connected(policy: Connections, first: Round) -> list[list[bytes]]:
    connect = policy.submit(first, 0, 0.0)
    assert isinstance(connect, Connect)
    opening = policy.connected(connect, None, 0.0)
    assert isinstance(opening, Write)
    return _commands(opening.data)


def _handshake(commands_reply: bytes, scripts_reply: bytes = _SCRIPTS_LOADED) -> bytes:
    return _INFO_VALKEY + commands_reply + scripts_reply * len(_scripts.ALL)


def _ready(commands_reply: bytes, scripts_reply: bytes = _SCRIPTS_LOADED) -> Connections:
    """A policy whose master 0 is connected and has answered its handshake."""
    policy = _policy()
    first = _round(Command.set_nx_px("k0", "t", 1000))
    _connected(policy, first)
    _feed(policy, _handshake(commands_reply, scripts_reply) + b"+OK\r\n")
    assert first.outcomes[0].status is NodeStatus.GRANTED
    return policy


def test_a_master_with_native_commands_is_sent_them_and_others_the_scripts() -> None:
    policy = _ready(_HAS_DELIFEQ)
    assert policy.links[0].capabilities.native == {DELIFEQ, SET_IFEQ}
    extend = _round(PLAIN.extend("k", "t", 1000, 1))
    release = _round(PLAIN.release("k", "t", notify=True), cleanup=True)
    inspect = _round(Command.run_script(_scripts.INSPECT, ["k"], []))
    sent = [policy.submit(round_, 0, 0.0) for round_ in (extend, release, inspect)]
    assert all(isinstance(action, Write) for action in sent)
    commands = [command for action in sent if isinstance(action, Write) for command in _commands(action.data)]
    assert [command[0] for command in commands] == [b"SET", b"DELIFEQ", b"PUBLISH", b"EVALSHA"]
    assert commands[0] == [b"SET", b"k", b"t", b"IFEQ", b"t", b"PX", b"1000"]
    # Replies are matched in order; the announcement's is read and dropped.
    _feed(policy, b"+OK\r\n:1\r\n:2\r\n*3\r\n:1\r\n$-1\r\n:-2\r\n")
    assert [r.outcomes[0].status for r in (extend, release, inspect)] == [NodeStatus.GRANTED] * 3
    assert not policy.links[0].in_flight


def test_each_form_is_encoded_once_per_round() -> None:
    policy = _ready(_HAS_DELIFEQ)
    release = PLAIN.release("k", "t", notify=False)
    round_ = Round(command=release, targets=(0, 1, 2), node_names=NAMES, quorum=2, timeout=0.05)
    first = policy.submit(round_, 0, 0.0)
    second = policy.submit(round_, 0, 0.0)  # (as to another master: only master 0 is up)
    assert isinstance(first, Write)
    assert isinstance(second, Write)
    assert second.data is first.data
    assert policy.wires is not None
    assert policy.wires.native[DELIFEQ] is first.data
    assert policy.wires.wire is None  # nobody needed the script's form
    again = Round(command=release, targets=(0,), node_names=NAMES, quorum=2, timeout=0.05)
    other = policy.submit(again, 0, 0.0)
    assert isinstance(other, Write)
    assert other.data == first.data
    assert other.data is not first.data


def test_a_master_without_them_is_sent_the_scripts() -> None:
    policy = _ready(_HAS_NONE)
    assert policy.links[0].capabilities.native == {SET_IFEQ}  # Valkey 9 by its version, DELIFEQ renamed away
    action = policy.submit(_round(PLAIN.release("k", "t", notify=True)), 0, 0.0)
    assert isinstance(action, Write)
    assert [command[0] for command in _commands(action.data)] == [b"EVALSHA"]


def test_an_extend_waits_for_the_handshake_to_say_which_form_and_the_rest_goes_at_once() -> None:
    policy = _policy()
    acquire = _round(Command.set_nx_px("k1", "t", 1000))
    connect = policy.submit(acquire, 0, 0.0)
    assert isinstance(connect, Connect)
    extends = [_round(PLAIN.extend("k1", "t", 1000, n)) for n in (1, 2)]
    rollback = _round(PLAIN.release("k0", "t", notify=False), cleanup=True)
    for round_ in (extends[0], rollback, extends[1]):
        assert policy.submit(round_, 0, 0.0) is None  # (queued behind the connect)
    opening = policy.connected(connect, None, 0.0)
    assert isinstance(opening, Write)
    written = _commands(opening.data)
    # The acquire and the rollback go at once, the rollback as its script (nothing is known
    # yet), right behind what it may undo: a rollback held back could be lost with a
    # connection closed before the master answered, and leave the SET it undoes behind.
    assert [command[0] for command in written[-2:]] == [b"SET", b"EVALSHA"]
    assert policy.links[0].connecting()  # a round waiting for an extend waits for the answer
    assert isinstance(policy.submit(_round(Command.set_nx_px("k3", "t", 1000)), 0, 0.0), Write)
    assert policy.submit(_round(PLAIN.extend("k1", "t", 1000, 3)), 0, 0.0) is None
    # COMMAND INFO's answer: the extends go, in their order, as SET IFEQ.
    later = _feed(policy, _INFO_VALKEY + _HAS_DELIFEQ)
    assert [command[0] for command in later] == [b"SET"] * 3
    assert [command[-1] for command in later] == [b"1000"] * 3
    assert all(b"IFEQ" in command for command in later)
    assert not policy.links[0].connecting()


def test_a_release_refused_as_a_script_goes_again_natively_where_the_master_has_it() -> None:
    policy = _policy()
    acquire = _round(Command.set_nx_px("k", "t", 1000))
    connect = policy.submit(acquire, 0, 0.0)
    assert isinstance(connect, Connect)
    release = _round(PLAIN.release("k", "t", notify=True), cleanup=True)
    policy.submit(release, 0, 0.0)
    policy.connected(connect, None, 0.0)
    noperm = b"-NOPERM User u has no permissions to run the 'evalsha' command\r\n"
    again = _feed(policy, _handshake(_HAS_DELIFEQ, _NOPERM_SCRIPT) + b"+OK\r\n" + noperm)
    assert [command[0] for command in again] == [b"DELIFEQ", b"PUBLISH"]
    assert release.pending == (0,)
    _feed(policy, b":1\r\n:0\r\n")
    assert release.outcomes[0].status is NodeStatus.GRANTED


def test_a_command_with_no_choice_goes_at_once_while_the_handshake_is_out() -> None:
    policy = _policy()
    _connected(policy, _round(Command.set_nx_px("k1", "t", 1000)))
    assert isinstance(policy.submit(_round(Command.set_nx_px("k2", "t", 1000)), 0, 0.0), Write)
    assert policy.submit(_round(PLAIN.extend("k1", "t", 1000, 1)), 0, 0.0) is None


def test_an_extend_lost_with_its_connection_goes_again_in_the_form_of_the_next_one() -> None:
    policy = _ready(_HAS_DELIFEQ)
    extend = _round(PLAIN.extend("k", "t", 1000, 1))
    sent = policy.submit(extend, 0, 0.0)
    assert isinstance(sent, Write)
    assert b"IFEQ" in _commands(sent.data)[0]
    reconnect = policy.lost("command", 0, ConnectionResetError(), 0.1)
    assert isinstance(reconnect, Connect)
    policy.connected(reconnect, None, 0.1)
    # This time the master has no SET IFEQ (another server came up at its address).
    again = _feed(policy, b"$0\r\n\r\n" + _HAS_NONE, 0.1)
    assert [command[0] for command in again] == [b"EVALSHA"]
    _feed(policy, _SCRIPTS_LOADED * len(_scripts.ALL) + b":1\r\n", 0.1)
    assert extend.outcomes[0].status is NodeStatus.GRANTED


def test_a_release_lost_with_its_connection_counts_not_there_as_released() -> None:
    policy = _ready(_HAS_DELIFEQ)
    release = _round(PLAIN.release("k", "t", notify=True), cleanup=True)
    policy.submit(release, 0, 0.0)
    reconnect = policy.lost("command", 0, ConnectionResetError(), 0.1)
    assert isinstance(reconnect, Connect)
    opening = policy.connected(reconnect, None, 0.1)
    assert isinstance(opening, Write)
    assert _commands(opening.data)[-1][0] == b"EVALSHA"  # at once, as its script
    _feed(policy, _handshake(_HAS_DELIFEQ) + b":0\r\n", 0.1)
    # Not there when sent again: its first send may have done it.
    assert release.outcomes[0].status is NodeStatus.GRANTED


@pytest.mark.parametrize(
    "refusal",
    [
        b"-ERR unknown command 'DELIFEQ', with args beginning with: 'k' 't'\r\n",
        b"-NOPERM User u has no permissions to run the 'delifeq' command\r\n",
    ],
)
def test_a_refused_native_command_goes_again_as_its_script_and_the_master_gets_scripts(refusal: bytes) -> None:
    policy = _ready(_HAS_DELIFEQ)
    release = _round(PLAIN.release("k", "t", notify=True), cleanup=True)
    policy.submit(release, 0, 0.0)
    resent = _feed(policy, refusal + b":0\r\n")  # (then the announcement's reply)
    assert [command[0] for command in resent] == [b"EVALSHA"]
    assert release.pending == (0,)
    assert policy.links[0].capabilities.native == frozenset()
    _feed(policy, b":1\r\n")
    assert release.outcomes[0].status is NodeStatus.GRANTED
    extend = policy.submit(_round(PLAIN.extend("k", "t", 1000, 2)), 0, 0.0)
    assert isinstance(extend, Write)
    assert _commands(extend.data)[0][0] == b"EVALSHA"


def test_a_key_our_user_may_not_touch_is_a_misconfiguration_in_any_form() -> None:
    policy = _ready(_HAS_DELIFEQ)
    release = _round(PLAIN.release("k", "t", notify=False), cleanup=True)
    policy.submit(release, 0, 0.0)
    assert _feed(policy, b"-NOPERM No permissions to access a key\r\n") == []
    assert release.outcomes[0].status is NodeStatus.MISCONFIGURED
    assert policy.links[0].capabilities.native == {DELIFEQ, SET_IFEQ}  # other keys still go natively


def test_set_ifeq_refused_as_a_syntax_error_goes_again_as_the_script() -> None:
    policy = _ready(_HAS_DELIFEQ)
    extend = _round(PLAIN.extend("k", "t", 1000, 1))
    policy.submit(extend, 0, 0.0)
    assert [command[0] for command in _feed(policy, b"-ERR syntax error\r\n")] == [b"EVALSHA"]


def test_a_master_that_runs_no_scripts_but_native_commands_serves_a_plain_lock() -> None:
    policy = _ready(_HAS_DELIFEQ, _NOPERM_SCRIPT)
    link = policy.links[0]
    assert link.state.value == "ready"
    assert not link.capabilities.scripting
    extend = _round(PLAIN.extend("k", "t", 1000, 1))
    multi = _round(MultiLock(("a", "b")).acquire("a", "t", 1000))
    policy.submit(extend, 0, 0.0)
    policy.submit(multi, 0, 0.0)
    _feed(policy, b"+OK\r\n-NOPERM User u has no permissions to run the 'evalsha' command\r\n")
    assert extend.outcomes[0].status is NodeStatus.GRANTED
    refused = multi.outcomes[0]
    assert refused.status is NodeStatus.MISCONFIGURED
    assert NEEDS_SCRIPTING in refused.detail
    assert multi.misconfigured is False  # one master of three: the round decides that


def test_scripting_disabled_by_renaming_is_a_misconfiguration_too() -> None:
    unknown = b"-ERR unknown command 'SCRIPT', with args beginning with: 'LOAD'\r\n"
    policy = _ready(_HAS_DELIFEQ, unknown)
    inspect = _round(Command.run_script(_scripts.INSPECT, ["k"], []))
    policy.submit(inspect, 0, 0.0)
    _feed(policy, b"-ERR unknown command 'EVALSHA', with args beginning with: \r\n")
    assert inspect.outcomes[0].status is NodeStatus.MISCONFIGURED
    assert NEEDS_SCRIPTING in inspect.outcomes[0].detail


def test_a_master_that_runs_neither_is_refused_at_the_handshake() -> None:
    policy = _policy()
    acquire = _round(Command.set_nx_px("k", "t", 1000))
    _connected(policy, acquire)
    parser = reply_parser()
    parser.feed(_INFO_VALKEY + _HAS_NONE + b"+OK\r\n" + _NOPERM_SCRIPT)
    # (Valkey 9 with DELIFEQ renamed away and no Lua for this user: SET IFEQ alone cannot release.)
    outcome = policy.received("command", 0, parser, 0.0)
    assert outcome.hang_up
    assert acquire.outcomes[0].status is NodeStatus.MISCONFIGURED
    assert NO_SCRIPTING_NOR_NATIVE in acquire.outcomes[0].detail


def test_a_refused_native_command_where_no_script_may_run_is_a_misconfiguration() -> None:
    policy = _ready(_HAS_DELIFEQ, _NOPERM_SCRIPT)
    release = _round(PLAIN.release("k", "t", notify=False), cleanup=True)
    policy.submit(release, 0, 0.0)
    assert _feed(policy, b"-ERR unknown command 'DELIFEQ'\r\n") == []
    assert release.outcomes[0].status is NodeStatus.MISCONFIGURED


def test_a_script_refused_for_a_reason_other_than_permission_does_not_count() -> None:
    policy = _ready(_HAS_NONE, b"-LOADING Valkey is loading the dataset in memory\r\n")
    assert policy.links[0].capabilities.scripting  # EVALSHA will say what it says


# --- a model master: the lock never carries an extend older than one counted there --------------


class NativeMaster(RuleBasedStateMachine):
    """Extends of one holding, submitted to one master in any interleaving with connects,
    losses (what was written runs up to some point, then nothing), NOSCRIPT answers, and
    masters that claim native commands they refuse.

    The model master keeps what an extend leaves: the number of the extend whose ttl the
    key carries, and the script's order key (the newest number a script applied). The
    invariant is the safety property of the order key, which native extends have without
    it: the key never carries an extend older than one whose grant the client counted on
    this master (the client's deadline rests on that one). Extend number n asks for a ttl
    of 1000 + n ms, so that a native SET, which carries no number, says which it is.
    """

    def __init__(self) -> None:
        super().__init__()
        self.policy = _policy()
        self.now = 0.0
        self.connect: Connect | None = None
        self.connected = False
        #: This connection's master: whether COMMAND INFO claims DELIFEQ, whether SET IFEQ works.
        self.claims = False
        self.runs = False
        self.unanswered: list[list[bytes]] = []
        self.carried = 0  # the extend whose ttl the key carries
        self.order_key = 0
        self.rounds: list[Round] = []

    @rule()
    def extend(self) -> None:
        number = len(self.rounds) + 1
        round_ = _round(PLAIN.extend("k", "t", 1000 + number, number))
        self.rounds.append(round_)
        self._carry_out(self.policy.submit(round_, 0, self.now))

    def _carry_out(self, action: Write | Connect | None) -> None:
        if isinstance(action, Connect):
            self.connect = action
        elif isinstance(action, Write):
            assert self.connected
            self.unanswered.extend(_commands(action.data))

    @precondition(lambda self: self.connect is not None)
    @rule(fails=st.booleans(), claims=st.booleans(), runs=st.booleans())
    def finish_connect(self, fails: bool, claims: bool, runs: bool) -> None:
        connect, self.connect = self.connect, None
        assert connect is not None
        if not self.policy.is_current(connect):
            return
        self.connected, self.claims, self.runs = not fails, claims, runs
        self.unanswered.clear()
        self._carry_out(self.policy.connected(connect, ConnectionRefusedError() if fails else None, self.now))

    def _run(self, command: list[bytes], noscript: bool) -> bytes:
        """Execute one command as the master would; its reply."""
        verb = command[0]
        if verb == b"COMMAND":
            return _HAS_DELIFEQ if self.claims else _HAS_NONE
        if verb == b"INFO":
            return _INFO_VALKEY
        if verb == b"SCRIPT":
            return _SCRIPTS_LOADED
        if verb == b"SET":
            if not self.runs:
                return b"-ERR syntax error\r\n"
            self.carried = int(command[-1]) - 1000
            return b"+OK\r\n"
        if verb == b"EVALSHA" and noscript:
            return b"-NOSCRIPT No matching script\r\n"
        assert verb in (b"EVALSHA", b"EVAL"), command
        number = int(command[-1])
        if number > self.order_key:
            self.order_key = self.carried = number
        return b":1\r\n"

    @precondition(lambda self: self.connected and self.unanswered)
    @rule(count=st.integers(min_value=1, max_value=20), noscript=st.booleans())
    def answer(self, count: int, noscript: bool) -> None:
        ran, self.unanswered = self.unanswered[:count], self.unanswered[count:]
        parser = reply_parser()
        parser.feed(b"".join(self._run(command, noscript) for command in ran))
        outcome = self.policy.received("command", 0, parser, self.now)
        assert outcome.failure is None
        if outcome.hang_up:
            self.connected = False
            self.unanswered.clear()
        elif outcome.write:
            self._carry_out(Write("command", 0, outcome.write))

    @precondition(lambda self: self.connected)
    @rule(ran=st.integers(min_value=0, max_value=6))
    def lose_connection(self, ran: int) -> None:
        for command in self.unanswered[:ran]:  # (run; their replies are lost with the connection)
            self._run(command, noscript=False)
        self.connected = False
        self.unanswered.clear()
        self._carry_out(self.policy.lost("command", 0, ConnectionResetError(), self.now))

    @rule(seconds=st.floats(min_value=0.0, max_value=0.5))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @invariant()
    def the_key_carries_no_extend_older_than_one_counted(self) -> None:
        counted = [
            number
            for number, round_ in enumerate(self.rounds, start=1)
            if round_.outcomes.get(0) is not None and round_.outcomes[0].status is NodeStatus.GRANTED
        ]
        assert self.carried >= max(counted, default=0)


TestNativeMaster = pytest.mark.slow(NativeMaster.TestCase)
TestNativeMaster.settings = settings(max_examples=500, stateful_step_count=40, deadline=None)


@given(st.lists(st.sampled_from([DELIFEQ, DELEX, SET_IFEQ]), unique=True))
def test_a_form_is_chosen_only_where_its_command_is(available: list[str]) -> None:
    for command in (PLAIN.release("k", "t", notify=True), PLAIN.extend("k", "t", 10, 1)):
        form = native_form(command, frozenset(available))
        assert form is None or form.needs in available
        assert (form is None) == (not {f.needs for f in command.native} & set(available))


# --- on real servers ---------------------------------------------------------------------------


def _calls(url: str) -> dict[str, int]:
    """How many times the master ran each command (INFO commandstats), by lower-case name."""
    with redis.Redis.from_url(url) as admin:
        return {name.removeprefix("cmdstat_"): stats["calls"] for name, stats in admin.info("commandstats").items()}


def _ran(before: list[dict[str, int]], urls: list[str], command: str) -> list[int]:
    """How many times each master ran ``command`` since ``before``."""
    return [_calls(url).get(command, 0) - earlier.get(command, 0) for url, earlier in zip(urls, before, strict=True)]


def _is_valkey(binary: str) -> bool:
    return server_version(binary).product == "Valkey"


def _left(urls: list[str], name: str) -> list[int]:
    """How many of the lock's keys (the key, its extend-order key) each master still has."""
    counts = []
    for url in urls:
        with redis.Redis.from_url(url) as admin:
            counts.append(admin.exists(name, f"redlock-quorum:order:{name}"))
    return counts


def test_a_plain_lock_uses_native_commands_where_the_server_has_them(
    client: ClientFactory, matrix_cluster: LocalMasters, server_binary: str
) -> None:
    urls = matrix_cluster.urls
    rl = client(urls)
    name = unique()
    before = [_calls(url) for url in urls]
    with rl.lock(name, ttl=5.0) as lock:
        assert lock.extend() > 4.0
        assert eventually(lambda: sum(_ran(before, urls, "set")) == 10)  # (the slowest may lag)
    assert eventually(lambda: _left(urls, name) == [0] * 5)
    if _is_valkey(server_binary):
        assert eventually(lambda: _ran(before, urls, "delifeq") == [1] * 5)
        assert _ran(before, urls, "evalsha") == [0] * 5  # neither the extend nor the release
        assert _ran(before, urls, "publish") == [1] * 5  # the release announced to waiters
    else:
        assert eventually(lambda: _ran(before, urls, "evalsha") == [2] * 5)
        assert "delifeq" not in _calls(urls[0])


def test_a_user_without_scripting_holds_plain_locks_where_masters_have_native_commands(
    client: ClientFactory, acl_masters: LocalMasters, server_binary: str
) -> None:
    urls = [master.user_url("no-scripts") for master in acl_masters]
    admin_urls = acl_masters.urls
    rl = client(urls)
    name = unique()
    if not _is_valkey(server_binary):
        # No Lua, and no native command to release with: refused up front, saying so.
        with pytest.raises(MasterMisconfigured, match="no Lua scripting, and has no native commands"):
            rl.lock(name, ttl=5.0).acquire()
        return
    lock = rl.lock(name, ttl=5.0)
    assert lock.acquire()
    assert lock.extend(ttl=6.0) > 5.0
    lock.release()
    assert eventually(lambda: _left(admin_urls, name) == [0] * 3)
    with rl.lock(name, ttl=1.0, auto_extend=True) as renewed:
        time.sleep(1.5)  # past its ttl: the renewer extended it (natively) in time
        assert renewed.locked()
    assert eventually(lambda: _left(admin_urls, name) == [0] * 3)
    # Whatever needs Lua is refused, and says why.
    for needs_lua in (
        lambda: rl.lock([name, unique()], ttl=5.0).acquire(),
        lambda: rl.lock(name, ttl=5.0, fencing=True).acquire(),
        lambda: rl.semaphore(name, limit=2, ttl=5.0).acquire(),
        lambda: rl.inspect(name),
    ):
        with pytest.raises(MasterMisconfigured, match="this needs Lua scripting"):
            needs_lua()
    assert eventually(lambda: _left(admin_urls, name) == [0] * 3)


def test_a_lock_is_handed_over_natively_where_no_script_may_run(
    client: ClientFactory, acl_masters: LocalMasters, server_binary: str
) -> None:
    if not _is_valkey(server_binary):
        pytest.skip("a user without scripting holds no lock on a server without native commands (above)")
    urls = [master.user_url("no-scripts") for master in acl_masters]
    admin_urls = acl_masters.urls
    rl = client(urls, retry_delay=5.0)
    name = unique()
    holder = rl.lock(name, ttl=30.0)
    assert holder.acquire()
    waiter = rl.lock(name, ttl=20.0)
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=30)), daemon=True)
    thread.start()
    assert eventually(lambda: parked(rl))  # in line, waiting in a pause
    before = [_calls(url) for url in admin_urls]
    holder.release()  # SET IFEQ with the waiter's token: the swap, without Lua
    thread.join(10)
    assert got == [True]
    assert _ran(before, admin_urls, "set") == [1] * 3
    assert _ran(before, admin_urls, "publish") == [0] * 3
    waiter.release()
    assert eventually(lambda: _left(admin_urls, name) == [0] * 3)


@pytest.fixture(scope="module")
def valkey_binary() -> str:
    return _binary_of("valkey")


@pytest.fixture(scope="module")
def redis7_binary() -> str:
    return _binary_of("debian")


def test_a_mixed_cluster_sends_each_master_its_own_form(
    client: ClientFactory, fresh_masters: MastersFactory, valkey_binary: str, redis7_binary: str
) -> None:
    valkeys = fresh_masters(3, binary=valkey_binary).urls
    redises = fresh_masters(2, binary=redis7_binary).urls
    urls = [valkeys[0], redises[0], valkeys[1], redises[1], valkeys[2]]
    before = [_calls(url) for url in urls]
    rl = client(urls)
    name = unique()
    with rl.lock(name, ttl=5.0) as lock:
        lock.extend()
    assert eventually(lambda: _left(urls, name) == [0] * 5)

    # The release goes to every master (a clean-up) and is native on each Valkey; the extend
    # may skip a master a loaded machine makes look hung, so Redis's script count is 1 or 2.
    # A master made to look hung also gets a new connection, and a release sent before its
    # handshake has said which form the master runs goes as the script, which every server
    # runs (seen once in 12 runs on a loaded machine): then that Valkey ran Lua once.
    def released() -> tuple[list[int], list[int]]:
        return _ran(before, urls, "delifeq"), _ran(before, urls, "evalsha")

    assert eventually(lambda: all(n + s >= 1 for n, s in zip(*(ran[0::2] for ran in released()), strict=True)))
    native, scripts = released()
    assert native[1::2] == [0, 0]  # never a native command where the server has none
    assert sum(native[0::2]) >= 2, native  # natively wherever the form was known
    assert all(n + s == 1 for n, s in zip(native[0::2], scripts[0::2], strict=True)), (native, scripts)
    assert all(1 <= ran <= 2 for ran in scripts[1::2]), scripts


def test_a_master_that_refuses_a_native_command_gets_the_script_instead(
    client: ClientFactory, fresh_masters: MastersFactory, valkey_binary: str
) -> None:
    # DELIFEQ renamed away, and a user who may not ask COMMAND INFO: the version (Valkey 9)
    # says DELIFEQ, the master answers that it does not know it, the script goes instead.
    blind = AclUser("blind", "blind-pw", rules=("~*", "&*", "+@all", "-command"))
    cluster = fresh_masters(
        3, binary=valkey_binary, password="pw", acl_users=[blind], extra_args=["--rename-command", "DELIFEQ", ""]
    )
    urls = [master.user_url("blind") for master in cluster]
    before = [_calls(url) for url in cluster.urls]
    rl = client(urls)
    for _ in range(2):
        with rl.lock(unique(), ttl=5.0) as lock:
            lock.extend()
    # The first extend went natively (SET IFEQ works); the first release was refused and went
    # again as the script; from then on that master got only scripts: the second extend and
    # release (three scripts in all). On a loaded machine a master that looks hung for a
    # moment is skipped by an extend, so count what must hold: every master ran the script
    # that replaced the refused release, none ran more scripts than there were operations
    # that needed one, and our keys are gone.
    assert eventually(lambda: min(_ran(before, cluster.urls, "evalsha")) >= 1)
    assert max(_ran(before, cluster.urls, "evalsha")) <= 3
    with redis.Redis.from_url(cluster.urls[0]) as admin:
        assert eventually(lambda: admin.dbsize() == 0)
        errors = admin.info("errorstats")
    assert errors["errorstat_ERR"]["count"] >= 1  # the one "unknown command"
