"""User-typed paths: inside the allowed folder they resolve; anything else is a PathNotAllowedError."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import PathNotAllowedError
from profiler.paths import allowed_data_dir, resolve_user_path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "scenarios").mkdir(parents=True)
    (data / "scenarios" / "a.toml").write_text("name = 'a'")
    (tmp_path / "secret.txt").write_text("secret")
    return data


def test_relative_and_absolute_paths_inside_resolve(root):
    assert resolve_user_path("scenarios/a.toml", root) == (root / "scenarios" / "a.toml").resolve()
    assert resolve_user_path(str(root / "scenarios" / "a.toml"), root) == (root / "scenarios" / "a.toml").resolve()
    assert resolve_user_path("scenarios/../scenarios/a.toml", root).name == "a.toml"  # '..' that stays inside is fine


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("../secret.txt", "outside the allowed folder"),
        ("scenarios/../../secret.txt", "outside the allowed folder"),
        ("/etc/passwd", "outside the allowed folder"),
        ("~/.ssh/id_rsa", "outside the allowed folder"),
        ("", "no file path"),
        ("   ", "no file path"),
        ("a\x00b", "NUL"),
        ("x" * 5000, "longer than"),
        ("scenarios/missing.toml", "is not a file"),
        ("scenarios", "is not a file"),
    ],
)
def test_paths_outside_or_malformed_are_refused(root, text, fragment):
    with pytest.raises(PathNotAllowedError, match=fragment):
        resolve_user_path(text, root)


def test_symlink_out_of_the_root_is_refused(root):
    (root / "link.txt").symlink_to(root.parent / "secret.txt")
    with pytest.raises(PathNotAllowedError, match="outside"):
        resolve_user_path("link.txt", root)


def test_suffixes_are_checked(root):
    assert resolve_user_path("scenarios/a.toml", root, suffixes=[".toml"]).suffix == ".toml"
    with pytest.raises(PathNotAllowedError, match=r"\.json"):
        resolve_user_path("scenarios/a.toml", root, suffixes=[".json", ".json.gz"])


def test_default_root_is_data_or_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("PODSCOPE_DATA_DIR", raising=False)
    assert allowed_data_dir().name == "data"
    monkeypatch.setenv("PODSCOPE_DATA_DIR", str(tmp_path))
    assert allowed_data_dir() == tmp_path.resolve()


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=40),
        st.lists(st.sampled_from(["..", ".", "", "/", "~", "etc", "scenarios", "a.toml", "\\", " ", "\x00"]), max_size=8).map("/".join),
    )
)
def test_any_text_resolves_inside_the_root_or_is_refused(tmp_path_factory, text):
    root = tmp_path_factory.getbasetemp() / "fuzzroot"
    (root / "scenarios").mkdir(parents=True, exist_ok=True)
    (root / "scenarios" / "a.toml").touch()
    try:
        path = resolve_user_path(text, root, must_exist=False)
    except PathNotAllowedError:
        return
    assert path.is_relative_to(root.resolve())
    assert os.path.realpath(path) == str(path)
