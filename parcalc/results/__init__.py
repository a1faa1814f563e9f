"""The results layer: typed requests in, `Result`s out, between the core and every client.

    flags / keyword arguments / run files  ->  request  ->  core  ->  Result (tables, verdicts)
                                   (parse: units, enums)    (math)     (parcalc.derivation)

Each command has a module here (parcalc.results.memory, ...) with `from_flags(**flags) -> Result`:
the command's flags as the command line gives them (texts with units, the core's Enums for choices,
switches) read into typed values (counts, seconds, bytes, presets) with the CLI's messages for bad
input, then the core's work and the Result, tables and verdicts included. `bubble` and
`peak-flops` split the two: `request(...)` gives a frozen request of parsed values
(BubbleRequest, PeakFlopsRequest), `result(request)` the Result. The command line
(parcalc.commands), the library (parcalc.api), run files, sweeps and worksheets all call these.

Nothing here imports Click or Typer: parcalc.commands parse the command line and print; the
library runs the same functions through parcalc.results.run, which reads each command's flags from
signatures.json (written from the commands: parcalc.commands.signatures).
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
