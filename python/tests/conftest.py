"""Shared helpers: the repository's paths, the memplan binary, a safetensors reader."""

import json
import os
import struct
import subprocess
import sysconfig
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
ZOO = REPO / "python" / "zoo"
COMMITTED = REPO / "ir" / "torch"


def installed_memplan() -> Path:
    """Where `pip install ./python` puts the memplan binary: this Python's scripts directory."""
    return Path(sysconfig.get_path("scripts")) / "memplan"


def memplan_binary() -> str:
    """$MEMPLAN, else the repository's release build, else its debug build (`.ci/run` runs
    `cargo test` first, which builds target/debug/memplan), else the one installed with the
    package."""
    for candidate in (os.environ.get("MEMPLAN"), REPO / "target/release/memplan", REPO / "target/debug/memplan", installed_memplan()):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.fail("no memplan binary: run `cargo build` in the repository first, set MEMPLAN, or `pip install ./python`")


@pytest.fixture(scope="session")
def memplan():
    binary = memplan_binary()

    def run(*args, check=True):
        done = subprocess.run([binary, *map(str, args)], capture_output=True, text=True, cwd=REPO)
        if check and done.returncode != 0:
            raise AssertionError(f"memplan {' '.join(map(str, args))} exited {done.returncode}:\n{done.stderr}")
        return done

    return run


_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32, "I64": torch.int64, "BOOL": torch.bool}


def read_safetensors(path) -> dict:
    data = Path(path).read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    body = data[8 + length :]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = bytearray(body[begin:end])
        tensor = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        out[name] = tensor.view(_DTYPES[entry["dtype"]]).reshape(entry["shape"]).clone()
    return out
