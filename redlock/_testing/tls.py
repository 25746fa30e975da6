"""Throwaway TLS certificates for local test masters (:mod:`redlock.servers`).

A master started with TLS needs a CA, a certificate for the addresses it answers on, and,
when it checks its clients, a client certificate the same CA signed. :func:`make_tls_files`
writes all of them as PEM files into a directory the caller owns, together with a second CA
that nothing trusts and a client certificate it signed, for "wrong CA" and "untrusted client"
tests. Nothing here is meant to protect anything: the keys live as long as the test run.

The certificates are made by ``trustme`` (a dev dependency, imported only here and only when
TLS is asked for); its ECDSA keys take a millisecond, so each set of masters gets fresh ones.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

__all__ = ["TLSFiles", "TrustmeMissing", "make_tls_files"]

# Every address a local master answers on (redlock.servers binds 127.0.0.1 only). A client
# that checks host names (redis-py does by default) accepts either spelling.
_SERVER_NAMES = ("127.0.0.1", "localhost")
_CLIENT_NAME = "redlock-test-client"


class TrustmeMissing(ImportError):
    """``trustme`` is not installed; the message says how to get it."""


@dataclasses.dataclass(frozen=True)
class TLSFiles:
    """The PEM files of one throwaway PKI, all in :attr:`dir`."""

    dir: pathlib.Path
    #: The CA that signed the server and client certificates: what clients must trust.
    ca_cert: pathlib.Path
    server_cert: pathlib.Path
    server_key: pathlib.Path
    #: A client certificate :attr:`ca_cert` signed, for masters that check their clients.
    client_cert: pathlib.Path
    client_key: pathlib.Path
    #: A CA that signed nothing the server uses: a client trusting only it must refuse the
    #: server, and a server must refuse a client certificate it signed.
    untrusted_ca_cert: pathlib.Path
    untrusted_client_cert: pathlib.Path
    untrusted_client_key: pathlib.Path


def make_tls_files(dir: str | os.PathLike[str]) -> TLSFiles:
    """Make a fresh CA, server and client certificates, and an untrusted CA, in ``dir``.

    ``dir`` is created if missing (mode 0700); keys are written with mode 0600.
    """
    try:
        import trustme  # noqa: PLC0415  (a dev dependency: only TLS masters need it)
    except ImportError as exc:
        raise TrustmeMissing(
            "TLS test masters need the `trustme` package for their throwaway certificates: "
            "`pip install trustme` (it is in the dev extra: pip install -e '.[dev]')"
        ) from exc
    root = pathlib.Path(dir)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    files = TLSFiles(
        dir=root,
        ca_cert=root / "ca.pem",
        server_cert=root / "server.pem",
        server_key=root / "server.key",
        client_cert=root / "client.pem",
        client_key=root / "client.key",
        untrusted_ca_cert=root / "untrusted-ca.pem",
        untrusted_client_cert=root / "untrusted-client.pem",
        untrusted_client_key=root / "untrusted-client.key",
    )
    ca = trustme.CA()
    untrusted_ca = trustme.CA()
    server = ca.issue_cert(*_SERVER_NAMES)
    client = ca.issue_cert(_CLIENT_NAME)
    untrusted_client = untrusted_ca.issue_cert(_CLIENT_NAME)
    ca.cert_pem.write_to_path(str(files.ca_cert))
    untrusted_ca.cert_pem.write_to_path(str(files.untrusted_ca_cert))
    for leaf, cert_path, key_path in (
        (server, files.server_cert, files.server_key),
        (client, files.client_cert, files.client_key),
        (untrusted_client, files.untrusted_client_cert, files.untrusted_client_key),
    ):
        # The leaf alone, not the chain: the peer must build the path to a CA it trusts.
        leaf.cert_chain_pems[0].write_to_path(str(cert_path))
        _write_private(key_path, leaf.private_key_pem.bytes())
    return files


def _write_private(path: pathlib.Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
