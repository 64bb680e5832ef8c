"""What a user sees of the ``autobyte`` command: help on every page, errors in one line."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

import common
from common.cli import build_parser, main


def _pages(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _pages(sub)


PAGES = list(_pages(build_parser()))


@pytest.mark.parametrize("page", PAGES[1:], ids=[p.prog for p in PAGES[1:]])
def test_every_page_has_a_description_an_example_and_help_on_every_option(
        page: argparse.ArgumentParser) -> None:
    assert page.description and len(page.description.strip()) > 20, page.prog
    leaf = not any(isinstance(a, argparse._SubParsersAction) for a in page._actions)
    if leaf:
        assert f"    {page.prog}" in page.description, f"{page.prog}: no example"
    for action in page._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        assert action.help, f"{page.prog}: {action.option_strings or action.dest} has no help"


def test_every_example_in_help_parses() -> None:
    parser = build_parser()
    for page in PAGES:
        text = (page.description or "").replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split("#")[0].strip()
            if not line.startswith("autobyte ") or "..." in line:
                continue
            words = line.split()[1:]
            try:
                parser.parse_args(words)
            except SystemExit as exc:
                pytest.fail(f"{page.prog}: example {line!r} does not parse ({exc})")


def test_launch_errors_name_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--framework", "tensorflow", "--workers", "2", "--place", "x=y",
                 "--", "python", "t.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autobyte launch: error: --place"), err
    assert err.count("\n") == 1


@pytest.mark.parametrize(("argv", "needle"), [
    (["launch", "--framework", "mxnet", "--workers", "0", "--", "python", "t.py"],
     "--workers must be >= 1, but got --workers=0"),
    (["launch", "--framework", "mxnet", "--workers", "2", "--timeout", "-1", "--", "python",
      "t.py"], "--timeout must be > 0 seconds, but got --timeout=-1"),
    (["launch", "--framework", "tensorflow", "--workers", "2", "--servers", "3", "--", "python",
      "t.py"], "--servers applies to mxnet only"),
    (["coordinator", "--bind", "tcp://127.0.0.1:0", "--workers", "2", "--partition", "-1MB"],
     "--partition must be positive"),
    (["coordinator", "--bind", "tcp://127.0.0.1:0", "--workers", "0"], "--workers must be > 0"),
    (["testbed", "up", "--hosts", "2", "--rate", "-1gbit"], "--rate must be > 0 bit/s"),
    (["testbed", "up", "--hosts", "0"], "--hosts must be between 1 and"),
    (["testbed", "up", "--hosts", "2", "--name", "Bad_Name"], "--name must be 2-10"),
    (["testbed", "rate", "--testbed", "nosuch"], "say the new rate: --rate"),
    (["testbed", "rate", "--testbed", "nosuch", "--schedule", "1gbit"], "--schedule '1gbit':"),
    (["testbed", "bench", "--rates", "fast"], "--rates must be a number"),
])
def test_errors_are_one_line_naming_the_flag(argv: list[str], needle: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Checked before anything starts: no job, no socket, no namespace."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    page = "autobyte " + " ".join(argv[:2] if argv[0] == "testbed" else argv[:1])
    assert err.startswith(f"{page}: error: {needle}"), err
    assert err.count("\n") == 1


def test_an_invalid_variable_reaching_a_command_is_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AUTOBYTE_PARTITION_BYTES", "abc")
    assert main(["coordinator", "--bind", "tcp://127.0.0.1:0", "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autobyte coordinator: error: AUTOBYTE_PARTITION_BYTES must be"), err
    assert "AUTOBYTE_PARTITION_BYTES='abc'" in err and err.count("\n") == 1


def test_meta_defaults_find_the_shipped_datasets_from_any_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from common.commands import meta

    monkeypatch.chdir(tmp_path)
    assert build_parser().parse_args(["meta", "eval"]).data is None
    for name in ("sim_holdout_v3.npz", "sim_train_v3.npz"):
        path = meta.shipped_dataset(name)
        assert path.is_absolute() and path.is_file()
        assert path.parent.parent == Path(common.__file__).resolve().parent.parent


@pytest.mark.parametrize(("page", "make"), [
    ("eval", "autobyte meta generate --holdout --grid --jobs 24 --seed 0 --out "),
    ("train", "autobyte meta generate --jobs 600 --seed 0 --out "),
])
def test_a_missing_shipped_dataset_says_where_and_how_to_make_it(
        page: str, make: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from common.commands import meta

    monkeypatch.setattr(meta, "DATASETS", tmp_path / "datasets")
    monkeypatch.chdir(tmp_path)
    assert main(["meta", page]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"autobyte meta {page}: error: the shipped dataset "
                          f"{tmp_path / 'datasets'}"), err
    assert make + str(tmp_path / "datasets") in err and err.count("\n") == 1
