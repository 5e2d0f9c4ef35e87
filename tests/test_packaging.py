"""Podscope installs as a package: a wheel built from this checkout gives a working ``podscope``.

The slow test builds and installs the checkout into a fresh virtual environment and runs the
console script from another folder, so the data files must come from the wheel, not from the
working directory. To stay fast it installs with ``--no-deps`` and lets the new environment see
the dependencies already installed for this interpreter (a ``.pth`` line naming this
environment's site-packages: ``venv --system-site-packages`` would only reach the base
interpreter's, not this virtual environment's).
"""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _pins(path: Path) -> set[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {line for line in lines if line and not line.startswith("-r")}


def test_pyproject_pins_the_same_versions_as_the_requirements_files():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert set(project["dependencies"]) == _pins(ROOT / "requirements.txt")
    assert set(project["optional-dependencies"]["dev"]) == _pins(ROOT / "requirements-dev.txt")
    assert set(project["optional-dependencies"]["xprof"]) == _pins(ROOT / "requirements-xprof.txt")
    assert set(project["optional-dependencies"]["tpu"]) == _pins(ROOT / "requirements-tpu.txt")
    assert project["scripts"]["podscope"] == "profiler.__main__:run"


@pytest.mark.slow
def test_installed_package_runs_a_bundled_scenario_from_another_folder(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bin_dir = venv / "bin"
    py = bin_dir / "python"
    venv_site = Path(
        subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       capture_output=True, text=True, check=True).stdout.strip()
    )  # fmt: skip
    (venv_site / "_podscope_test_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PODSCOPE_DB", "PODSCOPE_DATA_DIR")}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    install = subprocess.run(
        [py, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q", str(ROOT)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    podscope = str(bin_dir / "podscope")
    where = subprocess.run([py, "-c", "import engine.data_files as d; print(d.INSTALLED, d.DATA_DIR, d.DB_DIR)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert where[0] == "True" and Path(where[1]).is_relative_to(venv) and Path(where[2]) == tmp_path / "xdg" / "podscope"

    help_ = subprocess.run([podscope, "--help"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert help_.returncode == 0, help_.stderr
    assert help_.stdout.startswith("usage: podscope") and re.search(r"\brun\b.*\bvalidate\b", help_.stdout, re.S)

    run = subprocess.run([podscope, "run", "resnet50-v3-32", "--set", "training.steps=3", "--json"],
                         cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["name"] == "resnet50-v3-32" and summary["chips"] == 16 and summary["steps"] == 3
    # the default database went to the user data folder, not the working directory or site-packages
    assert (tmp_path / "xdg" / "podscope" / "podscope.duckdb").is_file()
    assert list(elsewhere.iterdir()) == []
    listed = subprocess.run([podscope, "runs", "--json"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "resnet50-v3-32" in listed.stdout
    # the HLO example finds its module beside the installed scenarios (the path is relative to the scenario)
    hlo = subprocess.run([podscope, "run", "jax-transformer-hlo-v5p-8", "--set", "training.steps=3", "--json"],
                         cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert hlo.returncode == 0, hlo.stderr
    assert json.loads(hlo.stdout)["hlo_collectives"] == {"all-reduce": {"count": 1, "bytes": 10490880.0}}
