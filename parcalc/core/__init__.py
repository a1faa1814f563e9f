"""The pure math of parcalc: numbers and dataclasses in, Derivations out. No I/O here."""
