// model/detail.hpp — helpers shared by the files of the model library, and shape_string() by the
// command line's messages too (not part of the public headers in include/attncheck).
#pragma once

#include "attncheck/model.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attncheck::detail {

// "[32, 16]"
std::string shape_string(const std::vector<std::size_t>& shape);

// Compares a tensor set (name -> shape) with expected_tensors(c); throws InputError naming the
// first missing, extra or mis-shaped tensor, prefixed by `what` (the file name).
void check_tensor_set(const ModelConfig& c,
                      const std::map<std::string, std::vector<std::size_t>>& shapes,
                      const std::string& what);

// The whole file. InputError naming the path when it is missing, a directory, or unreadable.
std::vector<std::uint8_t> read_file_bytes(const std::string& path);
// Writes the whole file; InputError naming the path on any failure.
void write_file_bytes(const std::string& path, const std::string& bytes);

}  // namespace attncheck::detail
