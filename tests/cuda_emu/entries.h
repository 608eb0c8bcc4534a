// entries.h — the kernels of a program as entries the emulator can run: `memplan_emu_entry`
// finds kernel `name` in registry.inc (one `ENTRY(kernel)` per kernel) and returns a
// function that calls it with cuLaunchKernel-style arguments (one pointer per parameter).
// Included after the program by emu.cpp (the fixed program) and kernels.cpp (a step's
// generated kernels).
#pragma once
#include <stddef.h>
#include <string.h>

#include <utility>

template <typename... A, size_t... I>
void invoke_impl(void (*f)(A...), void** args, std::index_sequence<I...>) {
    f(*static_cast<A*>(args[I])...);
}

template <typename... A>
void invoke(void (*f)(A...), void** args) {
    invoke_impl(f, args, std::index_sequence_for<A...>{});
}

struct Entry {
    const char* name;
    void (*call)(void**);
};

#define ENTRY(k) {#k, [](void** a) { invoke(&k, a); }},
static const Entry entries[] = {
#include "registry.inc"
};

// The entry of kernel `name`, or null.
extern "C" void (*memplan_emu_entry(const char* name))(void**) {
    for (const Entry& e : entries)
        if (strcmp(e.name, name) == 0) return e.call;
    return nullptr;
}
