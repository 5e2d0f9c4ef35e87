"""Perfetto export never replaces what it should not: an existing file needs --force, a device or folder never."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from engine import simulate
from engine.errors import InputError
from profiler.cli import main
from profiler.export import export_run
from profiler.store import write_run


@pytest.fixture
def run_id(db, small_scenario):
    return write_run(db, simulate(small_scenario))


def test_existing_file_is_refused_without_force_and_replaced_with_it(db, run_id, tmp_path, capsys):
    out = tmp_path / "existing.json"
    out.write_text("precious\n")
    assert main(["export", str(run_id), "--format", "perfetto", "-o", str(out), "--db", str(db.path)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert out.read_text() == "precious\n"
    assert main(["export", str(run_id), "--format", "perfetto", "-o", str(out), "--force", "--db", str(db.path)]) == 0
    assert out.read_text().startswith('{"displayTimeUnit"')
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left beside it


def _char_device(path: Path) -> bool:
    """A character device node that behaves like /dev/full (needs root); False when not allowed."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except (PermissionError, AttributeError):
        return False
    return True


@pytest.mark.parametrize("kind", ["fifo", "chardev", "dir", "symlink"])
def test_special_files_are_never_replaced_even_with_force(db, run_id, tmp_path, kind):
    target = tmp_path / "target"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "chardev":
        if not _char_device(target):
            pytest.skip("creating a device node needs root")
    elif kind == "dir":
        target.mkdir()
    else:
        (tmp_path / "real.json").write_text("precious\n")
        target.symlink_to(tmp_path / "real.json")
    before = target.lstat()
    with pytest.raises(InputError, match="export to a new file name"):
        export_run(db, run_id, "perfetto", target, force=True)
    after = target.lstat()
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    if kind == "symlink":
        assert (tmp_path / "real.json").read_text() == "precious\n"


def test_export_is_written_beside_the_target_and_renamed(db, run_id, tmp_path, monkeypatch):
    """The file appears whole or not at all: written under a temporary name in the same folder, then renamed."""
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append((Path(src), Path(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    out = tmp_path / "new.json.gz"
    export_run(db, run_id, "perfetto", out)
    (src, dst), = seen
    assert dst == out and src.parent.parent == tmp_path and src != out
