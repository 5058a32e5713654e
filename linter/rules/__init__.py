"""The rules: each code's judging logic (see docs/architecture.md)."""
