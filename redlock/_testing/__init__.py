"""Helpers for test masters that the public :mod:`redlock.servers` builds on: throwaway TLS
certificates (:mod:`.tls`) (docs/architecture.md)."""
