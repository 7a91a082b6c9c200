// libfuzzer/fuzz_npy.cpp — libFuzzer harness for the .npy reader (parse_npy) and the path the
// command line takes with it: `--memory M.npy` becomes a Memory checked by check_memory.
//
// Contract: any bytes are either an array whose data matches its shape, or an
// attncheck::InputError; never a crash, an out-of-bounds read, UB or a giant allocation.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>

#include "attncheck/error.hpp"
#include "attncheck/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    attncheck::NpyArray array;
    try {
        array = attncheck::parse_npy(data, size, "fuzz input");
    } catch (const attncheck::InputError&) {
        return 0;
    }
    // An accepted array holds exactly product(shape) floats (the shape of a 0-d array is {}).
    const std::size_t numel = std::accumulate(array.shape.begin(), array.shape.end(),
                                              std::size_t{1}, std::multiplies<>());
    if (numel != array.data.size()) {
        std::fprintf(stderr, "parse_npy: shape holds %zu elements but data has %zu\n", numel,
                     array.data.size());
        std::abort();
    }
    // What `attncheck logits --memory` does next: a [S, d] memory for a cross-attention model.
    if (array.shape.size() == 2 && array.shape[0] <= 1u << 20) {
        attncheck::ModelConfig config = attncheck::preset_config("tiny");
        config.cross_attention = true;
        attncheck::Memory memory;
        memory.rows = int(array.shape[0]);
        memory.valid_len = memory.rows;
        memory.data = std::move(array.data);
        try {
            attncheck::check_memory(config, memory);
        } catch (const attncheck::InputError&) {
        }
    }
    return 0;
}
