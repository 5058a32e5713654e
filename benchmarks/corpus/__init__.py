"""Linter corpora (see README.md): releases from PyPI, entries, scoring."""
