"""The `parcalc` command (and `python -m parcalc`).

Ctrl-C while the CLI's modules import (before parcalc.cli can catch it) ends the run at once
with one line and exit 130, instead of a KeyboardInterrupt traceback from inside an import.
"""

import signal


def _interrupted_at_start(signum: int, frame: object) -> None:
    import os

    os.write(2, b"Interrupted\n")
    os._exit(130)


# As early as this module runs: the imports below and parcalc.cli's take most of a one-liner's start-up.
_WATCHING = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not when the shell ignores it
if _WATCHING:
    signal.signal(signal.SIGINT, _interrupted_at_start)

import gc  # noqa: E402 - after the handler, on purpose


def main() -> None:
    watching = _WATCHING or signal.getsignal(signal.SIGINT) is _interrupted_at_start
    if watching:
        signal.signal(signal.SIGINT, _interrupted_at_start)
    # Importing typer and the CLI makes ~10^5 objects and no garbage, so the collector's passes over
    # them (one per 700 allocations) find nothing: ~2 ms of a one-liner. Run it less often meanwhile,
    # as ParcalcGroup.main does while a command runs; freeze + unfreeze then zeroes the counts, so
    # that putting the threshold back does not start a pass over everything at once.
    thresholds = gc.get_threshold()
    gc.set_threshold(200_000, *thresholds[1:])
    from parcalc.cli import app

    gc.freeze()
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    if watching:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    app(prog_name="parcalc")


if __name__ == "__main__":
    main()
