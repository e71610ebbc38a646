"""The stack config: parsed and checked into frozen dataclasses, one module per section.

The bottom layer: it imports no other infra package.
"""
