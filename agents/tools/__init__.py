"""Built-in tools. Importing this package registers them in `registry`."""

from agents.tools.registry import Tool, ToolContext, ToolError, ToolRegistry, registry

__all__ = ["Tool", "ToolContext", "ToolError", "ToolRegistry", "registry", "load_builtin_tools"]


def load_builtin_tools() -> ToolRegistry:
    """Register the built-in tools once and return the registry."""
    from agents.tools import calculator, search  # noqa: F401  (registration side effect)

    return registry
