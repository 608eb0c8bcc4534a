// kernels.cpp — a step's generated kernels (exec/cuda/generate.rs) for the emulator: built
// by tests/cuda_emu/mod.rs as a small shared library from this file, shim.h, the step's
// generated program (program.cu) and its registry (registry.inc). It defines no GPU state:
// threadIdx and the rest, barriers and shuffles resolve to emu.cpp's library (loaded
// globally before), which runs the entries `memplan_emu_entry` gives
// (`memplan_emu_launch_entry`). Without emu.cpp's scheduler this builds in a third of the
// time, which matters: the tests build one library per fused step.
#include "shim.h"

#include "program.cu"
#include "entries.h"
