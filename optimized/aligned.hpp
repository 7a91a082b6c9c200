// optimized/aligned.hpp — cache-line aligned storage for the optimized decoder's weights, caches
// and kernel scratch.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace attncheck::optimized {

// A cache line: what the packed weights, the kernels' scratch and copies are aligned to, and
// what values must be aligned to for a prefill to read them in place (attention_kernel.cpp,
// pack_all_key_tiles).
inline constexpr std::size_t kCacheLineBytes = 64;

// std::allocator with cache-line alignment, for data whose vector loads must not cross a line
// (a 64-byte AVX-512 load, or either half of a line on AVX2). A failed allocation throws
// std::bad_alloc, as std::allocator's does.
template <class T>
struct CacheLineAllocator {
    using value_type = T;
    static constexpr std::align_val_t kAlign{kCacheLineBytes};
    CacheLineAllocator() = default;
    template <class U>
    CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
    T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
    void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, kAlign); }
    template <class U>
    bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }
};
// Value-initialised by its size constructor and resize (zeros for arithmetic T).
template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace attncheck::optimized
