"""Renderers: turn a `Result` into text for the terminal, JSON, CSV, Markdown or LaTeX. No math here."""
