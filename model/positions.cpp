// model/positions.cpp — the sinusoidal position table and the rotary angles (model/positions.hpp).
#include "model/positions.hpp"

#include <cmath>

namespace attncheck {

std::vector<double> sinusoidal_positions(std::size_t n, std::size_t d) {
    std::vector<double> pos(n * d, 0.0);  // [n, d]
    for (std::size_t p = 0; p < n; ++p)
        for (std::size_t even = 0; even < d; even += 2) {  // even = 2i
            const double angle = double(p) / std::pow(10000.0, double(even) / double(d));
            pos[p * d + even] = std::sin(angle);
            if (even + 1 < d) pos[p * d + even + 1] = std::cos(angle);
        }
    return pos;
}

RopeTable rope_table(std::size_t n, std::size_t dk, double theta) {
    RopeTable t;
    t.rows = n;
    t.half = dk / 2;
    t.cos.assign(n * t.half, 0.0);
    t.sin.assign(n * t.half, 0.0);
    for (std::size_t i = 0; i < t.half; ++i) {
        const double inv_freq = std::pow(theta, -double(2 * i) / double(dk));
        for (std::size_t p = 0; p < n; ++p) {
            const double angle = double(p) * inv_freq;
            t.cos[p * t.half + i] = std::cos(angle);
            t.sin[p * t.half + i] = std::sin(angle);
        }
    }
    return t;
}

}  // namespace attncheck
