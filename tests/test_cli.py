"""The command line and the runtime package work without the bench and dataset
tooling's dependencies (Pillow, matplotlib, scikit-image): each test runs a
fresh interpreter in which importing them fails."""

from __future__ import annotations

import re
import subprocess

import numpy as np

from conftest import run_python, write_jpeg

TOOLING = ("PIL", "matplotlib", "skimage")
# A None entry in sys.modules makes `import PIL` raise ModuleNotFoundError.
BLOCK = f"import sys\nfor name in {TOOLING!r}:\n    sys.modules[name] = None\n"


def run_blocked(code: str) -> subprocess.CompletedProcess:
    return run_python(BLOCK + code)


def test_help_lists_the_commands_without_the_tooling():
    result = run_blocked("from conveyor.cli import main\nraise SystemExit(main(['--help']))")
    assert result.returncode == 0, result.stderr
    assert_lists_the_commands(result.stdout)


def assert_lists_the_commands(help_text: str) -> None:
    assert help_text.startswith("usage: conveyor [-h] [--version] COMMAND ...")
    for command in ("make-dataset", "bench", "pack"):
        assert re.search(rf"^    {command}\s", help_text, re.MULTILINE), command


def test_python_m_conveyor_help_without_the_tooling():
    code = (
        "import runpy\nsys.argv = ['conveyor', '--help']\nrunpy.run_module('conveyor', run_name='__main__')\n"
    )
    result = run_blocked(code)
    assert result.returncode == 0, result.stderr
    assert_lists_the_commands(result.stdout)


def test_sub_command_help_without_the_tooling():
    code = (
        "from conveyor.cli import main\n"
        "for command in ('make-dataset', 'bench', 'pack'):\n"
        "    try:\n"
        "        main([command, '--help'])\n"
        "    except SystemExit as e:\n"
        "        print('exit', command, e.code)\n"
    )
    result = run_blocked(code)
    assert result.returncode == 0, result.stderr
    for command in ("make-dataset", "bench", "pack"):
        assert f"usage: conveyor {command} " in result.stdout
        assert f"\nexit {command} 0\n" in result.stdout


def test_a_command_that_needs_missing_tooling_says_so(tmp_path):
    out = tmp_path / "mnist"
    arguments = ["make-dataset", str(out), "--mnist", "--images", "4"]
    code = f"from conveyor.cli import main\nraise SystemExit(main({arguments!r}))"
    result = run_blocked(code)
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        "conveyor make-dataset: needs the Python package 'PIL', which is not installed "
        "(pip install 'conveyor-loader[bench]')\n"
    )


def test_import_conveyor_imports_no_tooling(tmp_path):
    # The runtime works without them: a Loader decodes with the engine, not PIL.
    image = tmp_path / "a.jpg"
    write_jpeg(image, np.full((20, 30, 3), 128, np.uint8))
    code = (
        "import conveyor\n"
        "from conveyor import transforms as T\n"
        f"loader = conveyor.Loader(conveyor.sources.FileList([{str(image)!r}]), T.Resize((8, 8)))\n"
        "images, labels = next(iter(loader))\n"
        "print(tuple(images.shape))\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('PIL', 'matplotlib', 'skimage')"
        " and sys.modules[m] is not None or m.startswith(('conveyor.bench', 'conveyor.dataset',"
        " 'conveyor.cli', 'conveyor.pack')))\n"
        "print(loaded)\n"
    )
    result = run_blocked(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "(1, 3, 8, 8)\n[]\n"


def test_the_api_doc_names_every_bench_command():
    import argparse
    from pathlib import Path

    from conveyor.bench import cli

    parser = argparse.ArgumentParser()
    cli.add_commands(parser.add_subparsers())
    (command,) = [a for a in parser._subparsers._group_actions[0].choices.values()]
    benches = command._subparsers._group_actions[0].choices
    doc = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    section = doc[doc.index("## Command line") :]
    assert len(benches) >= 8
    assert [name for name in benches if f"`{name}`" not in section] == []


def test_doctor_plot_without_matplotlib_says_so_before_running_the_script(tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    arguments = ["doctor", "--plot", str(tmp_path / "steps.png"), "--", str(script)]
    result = run_blocked(f"from conveyor.cli import main\nraise SystemExit(main({arguments!r}))")
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        "conveyor doctor: needs the Python package 'matplotlib', which is not installed "
        "(pip install 'conveyor-loader[bench]')\n"
    )
    assert not marker.exists()
