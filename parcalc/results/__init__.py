"""The results layer: typed requests in, `Result`s out, between the core and every client.

    flags / keyword arguments / run files  ->  request  ->  core  ->  Result (tables, verdicts)
                                   (parse: units, enums)    (math)     (parcalc.derivation)

Each command has a module here (parcalc.results.memory, ...) in two steps:
- `request(**flags)`: the command's flags as the command line gives them (texts with units, the
  core's Enums for choices, switches) read into a frozen request of typed values (MemoryRequest,
  FitRequest, ...: a TransformerModel, a Layout, a TrainingSetup or fit's Training and Cluster,
  GPU presets, counts, seconds, bytes), every check of the input with the CLI's message naming
  the flag (InputError);
- `result(request)`: the core's work and the Result, tables and verdicts included; no parsing.
`from_flags(**flags)` is `result(request(**flags))`, what the command line (parcalc.commands), the
library (parcalc.api), run files, sweeps and worksheets call. `fit` reads its request in
parcalc.results.fit_request (fit.py computes); `layout_flags` reads the library's `layout=` (a
Layout) into the flags it stands for.

Nothing here imports Click or Typer: parcalc.commands parse the command line and print; the
library runs the same functions through parcalc.results.run, which reads each command's flags from
signatures.json (written from the commands: parcalc.signatures).
"""

from __future__ import annotations

# command name -> its module here ("module:function" where the function is not from_flags).
MODULES: dict[str, str] = {
    "analyze": "parcalc.results.analyze",
    "bubble": "parcalc.results.bubble",
    "comm-volume": "parcalc.results.comm_volume",
    "fit": "parcalc.results.fit",
    "flops": "parcalc.results.flops",
    "intensity": "parcalc.results.intensity",
    "memory": "parcalc.results.memory",
    "peak-flops": "parcalc.results.peak_flops",
    "presets list": "parcalc.results.presets:list_result",
    "presets show": "parcalc.results.presets:show_result",
    "scaling": "parcalc.results.scaling",
}
