"""One module per CLI command: options, then one core call, then one renderer.

Modules here import only typer and the standard library at the top; the core, presets and
renderers are imported inside the command so that start-up stays fast.
"""
