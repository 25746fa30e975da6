"""``redlock doctor``: whether the masters are fit for Redlock, what each one is and what to
fix; and what ``exec`` and ``leader`` say of it before their command runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Sequence

from redlock._api.sync import Redlock
from redlock._cli.common import (
    DEFAULT_STATUS_TIMEOUT,
    ExitCode,
    Parser,
    SharedOptions,
    library_quiet,
    master_urls,
    print_json,
    print_line,
    usage_errors,
)
from redlock._protocol.topology import REFUSED, Finding, MasterReport, Severity, TopologyReport, Verdict


def add_doctor(commands: argparse._SubParsersAction[Parser], options: SharedOptions) -> None:
    doctor = commands.add_parser(
        "doctor",
        parents=[options.cluster],
        help="whether the masters are fit for Redlock: what each one is, and what to fix",
        description="Ask every master what it is (INFO) and time a PING on each, as Redlock.check() does, "
        "and print each master, what was found about it, and the verdict. Exits 0 when the masters are "
        "fit, 1 when fit with warnings, 78 when a master is unfit for Redlock (with --strict: any warning), "
        "69 when fewer than a quorum could be used.",
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON object instead of a report")
    doctor.add_argument("--strict", action="store_true", help="judge as a client with strict=True: warnings unfit")
    doctor.add_argument(
        "--fencing", action="store_true", help="judge the masters for fencing tokens too (their persistence)"
    )
    doctor.set_defaults(handler=_cmd_doctor)


def _doctor_exit(report: TopologyReport) -> ExitCode:
    if any(master.refused for master in report.masters):
        return ExitCode.UNFIT
    if report.usable < report.quorum:
        return ExitCode.UNAVAILABLE
    return ExitCode.NOT_HELD if report.verdict is Verdict.WARNINGS else ExitCode.OK


def _report_json(master: MasterReport) -> dict[str, object]:
    """One master in the JSON output: the report's fields, the latency in milliseconds."""
    shown: dict[str, object] = {field.name: getattr(master, field.name) for field in dataclasses.fields(master)}
    del shown["latency"]
    shown["error"] = master.error or None
    shown["latency_ms"] = None if master.latency is None else round(master.latency * 1000, 3)
    shown["findings"] = [
        {"code": finding.code, "severity": finding.severity.value, "message": finding.message}
        for finding in master.findings
    ]
    return shown


def _said(value: object, shown: str | None = None) -> str:
    return "unknown" if value is None else str(value) if shown is None else shown


def _described(master: MasterReport) -> str:
    """One line of what a master is; "unknown" for what it did not say."""
    if not master.reachable:
        # A wrong password, an ACL or a TLS mismatch is an answer: the fix is ours, not the network's.
        refused = any(finding.code == REFUSED for finding in master.findings)
        return f"answered, refused: {master.error}" if refused else f"not reached: {master.error}"
    aof = None if master.aof_enabled is None else ("on" if master.aof_enabled else "off")
    parts = [
        f"{_said(master.server)} {master.version or ''}".rstrip(),
        f"{_said(master.mode)} {_said(master.role)}",
        f"replicas {_said(master.connected_replicas)}",
        f"maxmemory {_said(master.maxmemory, 'none' if master.maxmemory == 0 else None)}",
        f"policy {_said(master.maxmemory_policy)}",
        f"aof {_said(aof)}",
    ]
    if master.tls:
        parts.append("tls")
    if master.unix_socket:
        parts.append("unix socket")
    if master.latency is not None:
        parts.append(f"ping {master.latency * 1000:.3f} ms")
    return ", ".join(parts)


def _verdict_line(report: TopologyReport, code: ExitCode) -> str:
    refused = sum(master.refused for master in report.masters)
    warnings = len(report.findings(Severity.WARNING))
    usable = f"{report.usable} of {len(report.masters)} masters usable, quorum {report.quorum}"
    return {
        ExitCode.OK: f"fit: {usable}",
        ExitCode.NOT_HELD: f"fit, with {warnings} warning(s) to weigh: {usable}",
        ExitCode.UNFIT: f"unfit: {refused} master(s) refused; {usable}",
        ExitCode.UNAVAILABLE: f"unfit: {usable}",
    }[code]


def _cmd_doctor(args: argparse.Namespace) -> int:
    urls = master_urls(args)
    timeout = args.node_timeout or DEFAULT_STATUS_TIMEOUT
    with usage_errors():
        rl = Redlock(urls, node_timeout=timeout, strict=args.strict)
    # What the handshakes log as warnings, the report says in full: not twice.
    with library_quiet(), rl:
        report = rl.check(fencing=args.fencing)
    code = _doctor_exit(report)
    if args.json:
        summary = {
            "verdict": report.verdict.value,
            "quorum": report.quorum,
            "usable": report.usable,
            "strict": report.strict,
            "fencing": args.fencing,
            "masters": [_report_json(master) for master in report.masters],
        }
        print_json(summary)
        return code
    print_line(f"{len(report.masters)} masters (quorum {report.quorum}):")
    width = max(len(master.address) for master in report.masters)
    everywhere = _found_on_every_master(report)
    for master in report.masters:
        print_line(f"  {master.address.ljust(width)}  {_described(master)}")
        for finding in master.findings:
            if finding not in everywhere:
                print_line(f"    {_finding_line(finding)}")
    if everywhere and len(report.masters) > 1:
        print_line("  every master:")
        for finding in everywhere:
            print_line(f"    {_finding_line(finding)}")
    print_line(_verdict_line(report, code))
    return code


def _finding_line(finding: Finding) -> str:
    return f"{finding.severity.value:<8} {finding.code}: {finding.message}"


def _found_on_every_master(report: TopologyReport) -> list[Finding]:
    """The findings every master has, word for word: said once, not once per master."""
    first, *others = report.masters
    return [finding for finding in first.findings if all(finding in master.findings for master in others)]


def _findings_by_masters(report: TopologyReport, severities: Sequence[Severity]) -> list[tuple[list[str], Finding]]:
    """The findings of ``severities``, each with the masters it was found on, in the report's order."""
    grouped: dict[Finding, list[str]] = {}
    for address, finding in report.findings():
        if finding.severity in severities:
            grouped.setdefault(finding, []).append(address)
    return [(addresses, finding) for finding, addresses in grouped.items()]


def say_what_doctor_would(rl: Redlock, *, fencing: bool) -> None:
    """Before a command runs under a lock: doctor's warnings and refusals, each said once
    however many masters it holds for, and one warning when doctor would call the masters
    unfit (the command still goes ahead: a lock that cannot be had fails on its own, and a
    minority refused costs nothing). The handshakes' own warnings, one line per master for
    the same finding, are kept quiet: said here, not again."""
    with library_quiet():
        report = rl.check(fencing=fencing)
    library = logging.getLogger("redlock")
    errors = {master.address: master.error for master in report.masters if master.error}
    for addresses, finding in _findings_by_masters(report, (Severity.REFUSAL, Severity.WARNING)):
        masters = f"master {addresses[0]}" if len(addresses) == 1 else f"masters {', '.join(addresses)}, each"
        # What a final error would say of these masters again, in other words ("(reconnecting in ...)").
        texts = [finding.message, *(errors[address] for address in addresses if address in errors)]
        library.warning("%s: %s", masters, finding.message, extra={"told": (addresses, texts)})
    if report.verdict is Verdict.UNFIT:
        library.warning(
            "`redlock doctor` calls these masters unfit (%s); going ahead", _verdict_line(report, _doctor_exit(report))
        )
