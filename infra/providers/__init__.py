"""Providers: each turns a stack config into machines and a list of node specs."""
