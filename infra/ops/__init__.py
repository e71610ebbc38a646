"""Operator commands the CLI calls: local up/down, configure, verify, report, wheelhouse."""
