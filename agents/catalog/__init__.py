"""Agents managed like products (docs/agents.md): written over the API or in the admin, every change an immutable
version, any version restorable."""
