"""Helpers for the power programs' tests (tests/unit/test_power_*.py)."""
