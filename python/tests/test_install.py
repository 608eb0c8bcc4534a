"""One install: `pip install ./python` brings the `memplan` binary with memplan_torch.

Checked on the package under test when it is an installed one (as in `.ci/run`, which
tests from a fresh virtual environment after `pip install ./python`). With the source tree
on PYTHONPATH nothing was installed: then the build's own declaration is checked instead
(python/pyproject.toml builds the `memplan` bin of ../Cargo.toml into the wheel).
"""

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the TOML reader pip vendors
    from pip._vendor import tomli as tomllib

import memplan_torch
from conftest import REPO, installed_memplan


def test_the_installed_package_brings_the_memplan_binary(tmp_path):
    package = Path(memplan_torch.__file__).resolve().parent
    if package.is_relative_to(REPO / "python"):
        # Not installed: what `pip install ./python` would build. maturin's bin bindings
        # from the repository's Cargo project, whose `memplan` binary is src/main.rs.
        pyproject = tomllib.loads((REPO / "python" / "pyproject.toml").read_text())
        maturin = pyproject["tool"]["maturin"]
        assert pyproject["build-system"]["build-backend"] == "maturin"
        assert maturin["bindings"] == "bin" and (REPO / "python" / maturin["manifest-path"]).resolve() == REPO / "Cargo.toml"
        cargo = tomllib.loads((REPO / "Cargo.toml").read_text())
        assert any(b["name"] == "memplan" and b.get("path", "src/main.rs") == "src/main.rs" for b in cargo["bin"])
        assert (REPO / "src" / "main.rs").is_file()
        return
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
