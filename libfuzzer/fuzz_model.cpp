// libfuzzer/fuzz_model.cpp — libFuzzer harness for the model-file loader (parse_model).
//
// The bytes of a .safetensors file come from anyone; the contract (MODEL.md, model.hpp) is that
// every malformed file is refused with attncheck::InputError and nothing else happens: no crash,
// no read out of bounds (ASan), no undefined behaviour (UBSan), no allocation driven by a
// header's numbers (libFuzzer's -malloc_limit_mb, set by ci/fuzz.sh), no other exception type.
// An exception that is not an InputError escapes this function and libFuzzer reports it.
#include <cstdint>
#include <cstdlib>
#include <cstdio>

#include "attncheck/error.hpp"
#include "attncheck/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    attncheck::Model model;
    try {
        model = attncheck::parse_model(data, size, "fuzz input");
    } catch (const attncheck::InputError&) {
        return 0;  // refused with a message: the expected outcome for almost every input
    }
    // Accepted: then it must be a model both decoders can trust, i.e. validate() agrees.
    try {
        model.validate();
    } catch (const attncheck::InputError& e) {
        std::fprintf(stderr, "parse_model accepted a model that validate() refuses: %s\n", e.what());
        std::abort();
    }
    return 0;
}
