"""Where Podscope's bundled data files are, and where it keeps its default database.

Bundled files: ``chips.toml``, ``calibration.toml``, ``compile_cost.toml``, ``advice.toml``, ``convergence.toml``,
``reference/published.json``, ``scenarios/``, ``hlo/`` (the HLO module the example scenario
simulates; scenario paths are relative to the scenario file), ``sweeps/`` and ``plans/``. An installed wheel carries them
inside the ``engine`` package (``engine/data/``, see ``pyproject.toml``); a source checkout (and an
editable install of one) has them in the repository's ``data/`` folder. This module is the one
place that tells the two apart, so no other module looks at the working directory or guesses.

The default database (``--db`` and ``$PODSCOPE_DB`` come first, see ``profiler.store``) lives in
the checkout's ``data/`` folder, or, for an installed package, in the user's data folder
(``$XDG_DATA_HOME/podscope``, else ``~/.local/share/podscope``), never inside site-packages.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DATA_DIR", "INSTALLED", "DB_DIR"]

_PACKAGE_DIR = Path(__file__).resolve().parent
#: True when the data files came with an installed wheel (``engine/data/``), False in a checkout
INSTALLED: bool = (_PACKAGE_DIR / "data" / "chips.toml").is_file()
#: the folder holding chips.toml, calibration.toml, scenarios/, ...
DATA_DIR: Path = _PACKAGE_DIR / "data" if INSTALLED else _PACKAGE_DIR.parent / "data"


def _user_data_dir() -> Path:
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "podscope"


#: the folder of the default database file ``podscope.duckdb``
DB_DIR: Path = _user_data_dir() if INSTALLED else DATA_DIR
