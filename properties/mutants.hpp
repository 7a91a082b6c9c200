// properties/mutants.hpp — the mutant zoo: deliberately broken attention kernels, each a
// correct textbook kernel with exactly ONE bug that kernel authors really ship.
//
// Why: a property suite that passes every correct kernel proves nothing until it also fails
// broken ones. `attncheck fuzz --mutants` runs every property against every mutant and reports
// which property killed it and after how many cases (issue 4). The bugs are chosen from real
// kernels (masking alignment, softmax stability, padding, strides, memory safety, precision,
// determinism), not tuned to the properties: every mutant is observable through the ABI as a
// black box, i.e. some valid problem and inputs make its output (or its memory behaviour)
// differ from the specification.
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
//
// Notes for the properties engineer (what a harness needs to kill every mutant):
//   - `oob_write` writes out[B*H*Tq*Dv], one float past the end of out. Call mutants (at least
//     those with `writes_out_of_bounds`) only with an out buffer that has guard elements after
//     it (a plain std::vector of exactly the right size is a heap overflow: ASan aborts, a normal
//     build may corrupt the heap), or run them in an isolated worker (properties/isolation.hpp).
//   - `accumulates_into_out` adds into out instead of overwriting it: a harness that always
//     hands the kernel a zeroed out never sees it. Fill out with a poison value (NaN or random)
//     before each call, as any caller's uninitialised buffer would be.
//   - `input_modified` rescales q in place (q *= scale); it is observable only when scale != 1.
//   - `no_max_subtraction` needs scores above ~88 (exp overflows float32): the "large inputs"
//     generator. `nan_on_empty_row` needs a row with no visible key (kv_valid_len[b] = 0).
//   - `heads_mixed` needs H > 1; `batch_head_transposed` needs B > 1 and H > 1;
//     `padding_from_first_sequence` needs B > 1 with different kv_valid_len;
//     `online_rescale_forgotten` needs Tk > 2 (key tiles of 2) with a larger score in a later
//     tile; `causal_ignores_q_offset` needs causal with q_offset > 0; `causal_bottom_right`
//     (aligns the causal mask to the end of the keys, q_offset := kv_len - q_len) needs causal
//     with q_offset + q_len != kv_len, a valid ABI problem (e.g. a cache buffer longer than the
//     positions filled) that a decoder never produces: only kernel-level generators reach it.
//   - `nondeterministic` changes the output by one ulp on every other call (a global counter):
//     the determinism property (same call twice, bitwise) kills it.
//   - All mutants refuse a malformed problem (wrong abi_version, sizes < 1, ...) exactly like
//     the built-in kernels, so "unsupported" never hides a bug.
// mutants.cpp must be listed in properties/CMakeLists.txt (it needs attncheck_reference for
// attncheck::problem_error).
#pragma once

#include <string>
#include <vector>

#include "attncheck/kernel_abi.h"

namespace attncheck::properties {

struct Mutant {
    std::string name;         // short id, e.g. "diagonal_masked"
    attncheck_kernel_fn fn;   // follows attncheck/kernel_abi.h except for its one bug
    std::string bug;          // one line: what is wrong
    // True for a mutant that writes outside out: call it only with guard regions after out (or
    // in an isolated worker). Added beyond {name, fn, bug}; defaults to false.
    bool writes_out_of_bounds = false;
};

// Every mutant, in a fixed order (stable names: they appear in reports and on the command line).
const std::vector<Mutant>& mutant_kernels();

// nullptr when no mutant has that name.
const Mutant* find_mutant(const std::string& name);

// The correct float32 textbook kernel the mutants are derived from (the zoo's "wild type").
// It must pass every property; the zoo's tests check it against the reference so that each
// mutant's difference from the specification is its one bug and nothing else.
attncheck_kernel_fn mutant_base_kernel();
// The correct streaming (online softmax, key tiles of 2) kernel that `online_rescale_forgotten`
// is derived from; also must pass every property.
attncheck_kernel_fn mutant_online_base_kernel();

}  // namespace attncheck::properties
