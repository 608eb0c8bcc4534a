"""Writes the memory-snapshot fixtures memplan's tests read (tests/torch_snapshot.rs).

Each fixture is a plain dict (or, for torch 1.13's format, a list) shaped as
torch.cuda.memory._dump_snapshot() writes it (torch/cuda/memory.py `_snapshot`), pickled
with CPython's own `pickle.dump` in the protocol its name says, so the Rust reader is held
to real pickle bytes. No torch is needed. Run it from anywhere:

    python3 tests/data/torch_snapshots/make_fixtures.py

and commit the .pickle files it writes beside itself. The same dicts, the same bytes: the
output depends only on the protocol (pickle's output is deterministic for plain data).
`python_object.pickle` holds a Python object (a datetime.date: GLOBAL/STACK_GLOBAL and
REDUCE), which memplan must refuse without running anything.
"""

import datetime
import os
import pickle

HERE = os.path.dirname(os.path.abspath(__file__))

MiB = 1 << 20
A = 0x7F0000000000  # a large segment made before the trace began
B = 0x7F0000400000  # a small segment the trace makes
C = 0x7F0000600000  # a large segment the trace makes and frees (right after B)


def frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


TORCH = "/opt/conda/lib/python3.11/site-packages/torch"
ALLOC_CPP = frame("??", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc")
A1_FRAMES = [ALLOC_CPP, frame(f"{TORCH}/nn/modules/linear.py", 125, "forward"), frame("/home/me/train.py", 10, "step")]
A2_FRAMES = [
    ALLOC_CPP,
    frame(f"{TORCH}/nn/functional.py", 2000, "linear"),
    frame("/home/me/model.py", 42, "forward"),
    frame(f"{TORCH}/nn/modules/module.py", 1500, "_call_impl"),
    frame("/home/me/train.py", 20, "main"),
]
# One list object for a3's alloc event and its block: the pickle shares it (memo GET).
A3_FRAMES = [frame("/home/me/model.py", 50, "attention"), frame("/home/me/train.py", 20, "main")]
A4_FRAMES = [frame(f"{TORCH}/autograd/graph.py", 825, "_engine_run_backward")]
S0_FRAMES = [frame("/home/me/train.py", 5, "load_weights")]


def event(action, addr, size, k, frames=()):
    return {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": 0,
        "time_us": 1000 + 10 * k,
        "frames": frames if isinstance(frames, list) else list(frames),
        "compile_context": "N/A",
        "user_metadata": "",
    }


def handmade():
    """The trace tests/torch_snapshot.rs computes by hand (see `handmade_figures` there)."""
    events = [
        # The ring buffer dropped x0's alloc: its free is the first event.
        event("free_completed", A, 1000000, 1),
        event("segment_alloc", B, 2 * MiB, 2),
        event("alloc", B, 1000, 3, A1_FRAMES),
        event("alloc", A, 2000000, 4, A2_FRAMES),
        event("alloc", B + 1024, 500000, 5, A3_FRAMES),
        event("free_requested", B, 1000, 6),
        event("free_completed", B, 1000, 7),
        event("segment_alloc", C, 2 * MiB, 8),
        event("alloc", C, 2 * MiB, 9, A4_FRAMES),
        event("free_requested", A, 2000000, 10),
        event("free_completed", A, 2000000, 11),
        event("free_requested", C, 2 * MiB, 12),
        event("free_completed", C, 2 * MiB, 13),
        event("segment_free", C, 2 * MiB, 14),
        event("alloc", A, 100, 15, [frame("/home/me/train.py", 30, "log")]),
        {"action": "oom", "device_free": 1 * MiB, "size": 8 * MiB, "stream": 0, "time_us": 1160, "frames": []},
        {"action": "annotate", "addr": 0, "size": 0, "stream": 0, "time_us": 1170, "user_metadata": "step 1"},
    ]

    def block(address, size, state, requested=None, frames=None):
        return {"address": address, "size": size, "requested_size": size if requested is None else requested, "state": state, "frames": frames or []}

    segments = [
        {
            "device": 0, "address": A, "total_size": 4 * MiB, "allocated_size": 512 + MiB, "active_size": 512 + MiB,
            "requested_size": 100 + MiB, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [],
            "blocks": [
                block(A, 512, "active_allocated", 100, [frame("/home/me/train.py", 30, "log")]),
                block(A + 512, 2 * MiB - 512, "inactive"),
                block(A + 2 * MiB, MiB, "active_allocated", MiB, S0_FRAMES),
                block(A + 3 * MiB, MiB, "inactive"),
            ],
        },
        {
            "device": 0, "address": B, "total_size": 2 * MiB, "allocated_size": 500224, "active_size": 500224,
            "requested_size": 500000, "stream": 0, "segment_type": "small", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [],
            "blocks": [
                block(B, 1024, "inactive"),
                block(B + 1024, 500224, "active_allocated", 500000, A3_FRAMES),
                block(B + 1024 + 500224, 2 * MiB - 1024 - 500224, "inactive"),
            ],
        },
    ]
    return {
        "segments": segments,
        "device_traces": [events],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "expandable_segments": False},
        "external_annotations": [{"device": 0, "time_us": 1170, "stage": "START", "name": "step 1"}],
    }


E = 0x7F4000000000  # an expandable segment


def expandable():
    """Expandable segments: pages mapped and unmapped; the pieces are one segment."""
    events = [
        event("segment_map", E, 2 * MiB, 1),
        event("alloc", E, 3 * MiB // 2, 2),
        event("segment_map", E + 2 * MiB, 2 * MiB, 3),
        event("alloc", E + 3 * MiB // 2, 2 * MiB, 4, [frame("/home/me/train.py", 7, "grow")]),
        event("free_completed", E, 3 * MiB // 2, 5),
        event("segment_map", E + 4 * MiB, 2 * MiB, 6),
        event("alloc", E + 4 * MiB, 2 * MiB, 7),
        event("free_completed", E + 4 * MiB, 2 * MiB, 8),
        event("segment_unmap", E + 4 * MiB, 2 * MiB, 9),
    ]
    segments = [
        {
            "device": 1, "address": E, "total_size": 4 * MiB, "allocated_size": 2 * MiB, "active_size": 2 * MiB,
            "requested_size": 2 * MiB, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
            "is_expandable": True, "frames": [],
            "blocks": [
                {"address": E, "size": 3 * MiB // 2, "requested_size": 3 * MiB // 2, "state": "inactive", "frames": []},
                {"address": E + 3 * MiB // 2, "size": 2 * MiB, "requested_size": 2 * MiB, "state": "active_allocated", "frames": []},
                {"address": E + 7 * MiB // 2, "size": MiB // 2, "requested_size": MiB // 2, "state": "inactive", "frames": []},
            ],
        }
    ]
    # Device 1's: device 0 has no data, so memplan reads device 1 unless told otherwise.
    return {"segments": segments, "device_traces": [[], events]}


def old_format():
    """torch 1.13's memory_snapshot(): a bare list of segments; blocks without addresses."""
    return [
        {
            "device": 0, "address": A, "total_size": 20 * MiB, "allocated_size": 12 * MiB, "active_size": 12 * MiB,
            "stream": 0, "segment_type": "large",
            "blocks": [
                {"size": 8 * MiB, "state": "active_allocated", "history": []},
                {"size": 4 * MiB, "state": "inactive", "history": []},
                {"size": 4 * MiB, "state": "active_allocated", "history": []},
                {"size": 4 * MiB, "state": "inactive", "history": []},
            ],
        },
        {
            "device": 0, "address": A + 32 * MiB, "total_size": 2 * MiB, "allocated_size": 0, "active_size": 0,
            "stream": 0, "segment_type": "small",
            "blocks": [{"size": 2 * MiB, "state": "inactive", "history": []}],
        },
    ]


def main():
    fixtures = [
        ("handmade_p2.pickle", handmade(), 2),
        ("handmade_p4.pickle", handmade(), 4),
        ("handmade_p5.pickle", handmade(), 5),
        ("expandable.pickle", expandable(), 4),
        ("old_format.pickle", old_format(), 2),
        ("python_object.pickle", {"segments": [], "device_traces": [], "when": datetime.date(2024, 1, 1)}, 4),
    ]
    for name, data, protocol in fixtures:
        with open(os.path.join(HERE, name), "wb") as f:
            pickle.dump(data, f, protocol=protocol)


if __name__ == "__main__":
    main()
