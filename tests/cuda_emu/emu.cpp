// emu.cpp — runs memplan's CUDA kernels on the CPU for the tests: a GPU in miniature.
//
// Built by tests/cuda_emu/mod.rs as a shared library from this file, shim.h, the kernel
// program (program.cu, written by the test from exec::cuda::source::program()) and a
// registry of kernel names (registry.inc, read by entries.h). A step's generated kernels
// are a library of their own (kernels.cpp) whose entries run here
// (`memplan_emu_launch_entry`): this library is loaded first and globally, so theirs
// find its threadIdx, barriers and shuffles. `memplan_emu_launch` runs one launch: blocks one
// after another; inside a block every thread is a fiber that runs until it finishes or
// reaches a barrier. Fibers are switched with _setjmp/_longjmp, which save no signal mask
// and so make no system call; each of the (at most 1024) fiber stacks is set up once with
// makecontext and then runs thread after thread in a loop. `__syncthreads()` releases when every live thread
// of the block has reached it; a warp shuffle when every live lane of the warp has (values
// double-buffered, so one barrier per shuffle suffices). Anything else is a deadlock,
// reported as an error, as are launch configurations CUDA would refuse.
#include "shim.h"

#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>
#include <ucontext.h>

#include <utility>
#include <vector>

dim3 threadIdx, blockIdx, blockDim, gridDim;

#include "program.cu"
#include "entries.h"

namespace {

enum State { RUNNABLE, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };

struct Fiber {
    ucontext_t start;   // only to enter the fiber the first time
    jmp_buf at;         // where it parked
    State state;
    bool ready;         // parked at the top of its loop, waiting for a thread to run
    unsigned shuffles;  // parity picks the shuffle buffer
};

const size_t STACK = 64 * 1024;
std::vector<Fiber> fibers;
std::vector<std::vector<char>> stacks;
std::vector<double> lanes[2];  // shuffle values by linear thread id, double-buffered

// One lane's operands of a warp-wide mma (emu_mma16816), double-buffered like shuffles.
struct MmaLane {
    unsigned a[4], b[2];
};
std::vector<MmaLane> mma_lanes[2];
ucontext_t scheduler_ctx;
jmp_buf scheduler;
int current = 0;
void (*entry)(void**) = nullptr;
void** entry_args = nullptr;

void park(State state) {
    fibers[current].state = state;
    if (!_setjmp(fibers[current].at)) _longjmp(scheduler, 1);
}

// Every fiber runs threads forever: one per resume from the scheduler.
void fiber_loop() {
    for (;;) {
        entry(entry_args);
        park(DONE);
    }
}

// Runs one block; false on a deadlock.
bool run_block(int threads) {
    if ((int)fibers.size() < threads) {
        // Resizing moves the fibers' jmp_bufs, which stay valid (they hold no pointer into
        // themselves); the stacks they point into must not move, so they are never resized
        // once made.
        fibers.resize(threads);
        stacks.resize(threads, std::vector<char>(STACK));
        lanes[0].resize(threads);
        lanes[1].resize(threads);
        mma_lanes[0].resize(threads);
        mma_lanes[1].resize(threads);
    }
    for (int i = 0; i < threads; ++i) {
        fibers[i].state = RUNNABLE;
        fibers[i].shuffles = 0;
    }
    for (;;) {
        for (int i = 0; i < threads; ++i) {
            if (fibers[i].state != RUNNABLE) continue;
            current = i;
            threadIdx.x = i % blockDim.x;
            threadIdx.y = (i / blockDim.x) % blockDim.y;
            threadIdx.z = i / (blockDim.x * blockDim.y);
            if (_setjmp(scheduler)) continue;  // the fiber parked or finished
            if (fibers[i].ready) _longjmp(fibers[i].at, 1);
            fibers[i].ready = true;
            getcontext(&fibers[i].start);
            fibers[i].start.uc_stack.ss_sp = stacks[i].data();
            fibers[i].start.uc_stack.ss_size = STACK;
            fibers[i].start.uc_link = nullptr;
            makecontext(&fibers[i].start, fiber_loop, 0);
            swapcontext(&scheduler_ctx, &fibers[i].start);
        }
        int done = 0, at_block = 0;
        for (int i = 0; i < threads; ++i) {
            done += fibers[i].state == DONE;
            at_block += fibers[i].state == AT_BLOCK_BARRIER;
        }
        if (done == threads) return true;
        bool released = false;
        for (int w = 0; w < threads; w += 32) {
            int end = w + 32 < threads ? w + 32 : threads, waiting = 0, live = 0;
            for (int i = w; i < end; ++i) {
                live += fibers[i].state != DONE;
                waiting += fibers[i].state == AT_WARP_BARRIER;
            }
            if (waiting > 0 && waiting == live) {
                for (int i = w; i < end; ++i)
                    if (fibers[i].state == AT_WARP_BARRIER) fibers[i].state = RUNNABLE;
                released = true;
            }
        }
        if (!released && at_block > 0 && at_block + done == threads) {
            for (int i = 0; i < threads; ++i)
                if (fibers[i].state == AT_BLOCK_BARRIER) fibers[i].state = RUNNABLE;
            released = true;
        }
        if (!released) {
            // Fibers stuck inside the kernel: set their stacks up afresh next time.
            for (int i = 0; i < threads; ++i) fibers[i].ready = false;
            return false;
        }
    }
}

}  // namespace

void __syncthreads() { park(AT_BLOCK_BARRIER); }

double emu_shfl_xor(double v, int lane_mask) {
    const int me = current, lane = me % 32;
    std::vector<double>& buffer = lanes[fibers[me].shuffles++ % 2];
    buffer[me] = v;
    park(AT_WARP_BARRIER);
    return buffer[me - lane + (lane ^ lane_mask)];
}

// A 16-bit operand value as float: f16 or bf16.
static float emu_half(unsigned bits, bool bf16) {
    return bf16 ? bf16_to_float((unsigned short)bits) : f16_to_float((unsigned short)bits);
}

// The element (half = 0 low, 1 high) of register r of lane l's fragment, as float.
static float emu_operand(const unsigned* regs, int r, int half, bool bf16) { return emu_half(regs[r] >> (16 * half), bf16); }

// mma.sync.m16n8k16.row.col with float accumulators, as the PTX ISA lays the fragments out
// (attention.cu says how): each lane deposits its A and B registers, waits for the warp,
// then computes its own four outputs from the whole warp's operands, d += Σ_k A·B in k
// order, in float (the tensor cores' order and rounding of the sum are their own; the
// difference is far inside every tolerance).
void emu_mma16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], bool bf16) {
    const int me = current, lane = me % 32, base = me - lane;
    std::vector<MmaLane>& buffer = mma_lanes[fibers[me].shuffles++ % 2];
    for (int i = 0; i < 4; ++i) buffer[me].a[i] = a[i];
    for (int i = 0; i < 2; ++i) buffer[me].b[i] = b[i];
    park(AT_WARP_BARRIER);
    // A[m][k]: lane 4·(m % 8) + (k % 8) / 2, register (k >= 8 ? 2 : 0) + (m >= 8), half k % 2.
    auto A = [&](int m, int k) {
        return emu_operand(buffer[base + 4 * (m % 8) + (k % 8) / 2].a, (k >= 8 ? 2 : 0) + (m >= 8 ? 1 : 0), k % 2, bf16);
    };
    // B[k][n]: lane 4·n + (k % 8) / 2, register k >= 8, half k % 2.
    auto B = [&](int k, int n) { return emu_operand(buffer[base + 4 * n + (k % 8) / 2].b, k >= 8 ? 1 : 0, k % 2, bf16); };
    const int g = lane / 4, q = lane % 4;
    for (int i = 0; i < 4; ++i) {
        const int m = g + (i >= 2 ? 8 : 0), n = 2 * q + i % 2;
        float sum = d[i];
        for (int k = 0; k < 16; ++k) sum += A(m, k) * B(k, n);
        d[i] = sum;
    }
}

// Runs `call` (a kernel's entry, entries.h) named `name` on grid × block with `args`
// (cuLaunchKernel's kernelParams). Returns 0, or nonzero with a message in `err`. The
// libraries of a step's generated kernels (kernels.cpp) hand their entries here.
extern "C" int memplan_emu_launch_entry(const char* name, void (*call)(void**), const unsigned* grid,
                                        const unsigned* block, void** args, char* err, int err_len) {
    const unsigned long threads = (unsigned long)block[0] * block[1] * block[2];
    if (threads == 0 || threads > 1024 || block[2] > 64 || grid[0] == 0 || grid[1] == 0 || grid[2] == 0 ||
        grid[1] > 65535 || grid[2] > 65535) {
        snprintf(err, err_len, "%s: invalid launch grid (%u, %u, %u) block (%u, %u, %u)", name, grid[0], grid[1],
                 grid[2], block[0], block[1], block[2]);
        return 2;
    }
    entry = call;
    entry_args = args;
    gridDim = {grid[0], grid[1], grid[2]};
    blockDim = {block[0], block[1], block[2]};
    for (unsigned z = 0; z < grid[2]; ++z)
        for (unsigned y = 0; y < grid[1]; ++y)
            for (unsigned x = 0; x < grid[0]; ++x) {
                blockIdx = {x, y, z};
                if (!run_block((int)threads)) {
                    snprintf(err, err_len, "%s: deadlock in block (%u, %u, %u): threads wait at barriers that never release",
                             name, x, y, z);
                    return 3;
                }
            }
    return 0;
}

// Runs kernel `name` of the program on grid × block with `args`. Returns 0, or nonzero
// with a message in `err`.
extern "C" int memplan_emu_launch(const char* name, const unsigned* grid, const unsigned* block, void** args,
                                  char* err, int err_len) {
    void (*call)(void**) = memplan_emu_entry(name);
    if (!call) {
        snprintf(err, err_len, "no kernel %s in the program", name);
        return 1;
    }
    return memplan_emu_launch_entry(name, call, grid, block, args, err, err_len);
}
