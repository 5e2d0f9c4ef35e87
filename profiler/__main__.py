import os
import sys

from .cli import main

try:
    code = main()
    sys.stdout.flush()
except BrokenPipeError:
    # The reader went away (`... | head`): not an error of ours. Point stdout at devnull so the
    # interpreter's final flush does not raise again (Python docs, "Note on SIGPIPE").
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = 0
sys.exit(code)
