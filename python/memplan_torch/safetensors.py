"""Writing tensors as a safetensors file (the format `memplan run --weights` reads).

The format: an 8-byte little-endian header length, a JSON header
`{"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}}` padded with
spaces to a multiple of 8, then the raw little-endian data in header order. Written here
(a few lines) rather than with the `safetensors` package, so the exporter depends on torch
alone.
"""

from __future__ import annotations

import ctypes
import json
import struct

import torch

_DTYPES = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.bool: "BOOL",
}


def _raw_bytes(tensor: torch.Tensor) -> bytes:
    """`tensor`'s elements as bytes, row-major, in one copy of memory: a clone owns a
    storage of exactly its own bytes, read at its address (iterating a storage in Python
    took seconds per megabyte; NumPy is not a dependency)."""
    clone = tensor.detach().cpu().clone(memory_format=torch.contiguous_format)
    size = clone.untyped_storage().nbytes()
    return ctypes.string_at(clone.data_ptr(), size) if size else b""


def to_bytes(tensors: dict[str, torch.Tensor]) -> bytes:
    """The bytes of a safetensors file holding `tensors`, in their order."""
    header, chunks, offset = {}, [], 0
    for name, tensor in tensors.items():
        if tensor.dtype not in _DTYPES:
            raise ValueError(f"{name}: dtype {tensor.dtype} has no memplan equivalent")
        data = _raw_bytes(tensor)
        header[name] = {"dtype": _DTYPES[tensor.dtype], "shape": list(tensor.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def write_new(path: str, tensors: dict[str, torch.Tensor]) -> None:
    """Writes `tensors` to a NEW file at `path` (an existing file is never overwritten)."""
    with open(path, "xb") as f:
        f.write(to_bytes(tensors))
