// placeholder: owned by the properties engineer (replaced by the real driver).
#include "properties/fuzz.hpp"

#include <iostream>

namespace attncheck::properties {
int fuzz_main(const std::vector<std::string>&) {
    std::cerr << "attncheck fuzz: not built yet\n";
    return 2;
}
}  // namespace attncheck::properties
