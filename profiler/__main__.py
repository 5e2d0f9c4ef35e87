"""``python -m profiler`` and the ``podscope`` command: the CLI, quiet when its reader goes away."""

import os
import sys

from .cli import main


def run() -> None:
    """Run the CLI and exit with its status."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`... | head`): not an error of ours. Point stdout at devnull so the
        # interpreter's final flush does not raise again (Python docs, "Note on SIGPIPE").
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)


if __name__ == "__main__":
    run()
