"""One install: `pip install ./python` brings the `memplan` binary with memplan_torch.

Checked on the package under test when it is an installed one (as in `.ci/run`, which
tests from a fresh virtual environment after `pip install ./python`). With the source tree
on PYTHONPATH nothing was installed, and there is nothing to check.
"""

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

import memplan_torch
from conftest import REPO, installed_memplan


def test_the_installed_package_brings_the_memplan_binary(tmp_path):
    package = Path(memplan_torch.__file__).resolve().parent
    if package.is_relative_to(REPO / "python"):
        pytest.skip(f"memplan_torch is the source tree's ({package}), not an installed one")
    binary = installed_memplan()
    assert binary.is_file(), f"memplan_torch is installed ({package}) but the memplan binary is not: {binary}"
    # The distribution that installed this memplan_torch lists the binary among its files.
    def files(distribution):
        return {Path(distribution.locate_file(f)).resolve() for f in distribution.files or ()}
    owners = [d for d in importlib.metadata.distributions(name="memplan-torch") if Path(memplan_torch.__file__).resolve() in files(d)]
    assert len(owners) == 1, f"no single installed memplan-torch owns {memplan_torch.__file__}"
    distribution = owners[0]
    assert binary.resolve() in files(distribution), f"{binary} is not one of memplan-torch's installed files"

    # The crate's version, which is the package's.
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["memplan", distribution.version]

    # `python -m memplan_torch` finds it with neither $MEMPLAN nor the environment's bin/ on
    # PATH (`venv/bin/python -m memplan_torch fit ...`, not activated).
    env = {name: value for name, value in os.environ.items() if name != "MEMPLAN"}
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep) if d and Path(d).resolve() != binary.parent.resolve())
    found = subprocess.run([sys.executable, "-c", "from memplan_torch.__main__ import find_memplan; print(find_memplan(None))"],
                           capture_output=True, text=True, cwd=tmp_path, env=env)
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).resolve() == binary.resolve()
