"""The results layer: typed requests in, `Result`s out, between the core and every client.

    flags / keyword arguments / run files  ->  request  ->  core  ->  Result (tables, verdicts)
                                   (parse: units, enums)    (math)     (parcalc.derivation)

Each command the library runs has a module here (parcalc.results.bubble, ...). It holds the
command's request (a frozen dataclass of parsed, typed values: counts, seconds, bytes, enums), the
function that reads a request from the command's flag texts (`request(...)`, with the CLI's messages
for bad input), and the function that computes the Result from a request (`result(request)`),
tables and verdicts included. `from_flags(**flags)` is the two in one: what the command line, the
library (parcalc.api), run files, sweeps and worksheets all call.

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
