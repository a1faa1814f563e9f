"""The `parcalc` command (and `python -m parcalc`).

Ctrl-C while the CLI's modules import (before parcalc.cli can catch it) ends the run at once
with one line and exit 130, instead of a KeyboardInterrupt traceback from inside an import.
"""

import os
import signal


def _interrupted_at_start(signum: int, frame: object) -> None:
    os.write(2, b"Interrupted\n")
    os._exit(130)


def main() -> None:
    watching = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not when the shell ignores it
    if watching:
        signal.signal(signal.SIGINT, _interrupted_at_start)
    from parcalc.cli import app

    if watching:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    app(prog_name="parcalc")


if __name__ == "__main__":
    main()
