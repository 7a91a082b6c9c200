#!/bin/bash -eu
# ClusterFuzzLite's build of attncheck's libFuzzer harnesses (run in the image of the Dockerfile next
# to it, from $SRC/attncheck). The same code as libfuzzer/CMakeLists.txt builds: every model/*.cpp
# and one harness each, with nlohmann's JSON header; but with the compiler, flags and fuzzing
# engine ClusterFuzzLite chooses ($CXX, $CXXFLAGS with the sanitizer of the run,
# $LIB_FUZZING_ENGINE), not that file's fixed clang options. Into $OUT go each harness, its
# dictionary (<harness>.dict), its seed corpus (<harness>_seed_corpus.zip, from libfuzzer/corpus/)
# and its libFuzzer options (<harness>.options, the limits of ci/fuzz.sh).
cd "$SRC/attncheck"

# One per reader: libfuzzer/<harness>.cpp, with libfuzzer/<name>.dict and libfuzzer/corpus/<name>/
# (<harness> = fuzz_<name>). tests/campaign/validate_examples.py checks this list against libfuzzer/.
harnesses=(fuzz_model fuzz_npy fuzz_tokens)

flags=(-std=c++20 -I include -I . -I "$SRC/nlohmann_json/single_include")

# model/config.cpp reads floats with std::from_chars, which libc++ has only from LLVM 20 on. With an
# older one (OSS-Fuzz's clang), a stand-in built on strtod is included first: config.cpp has already
# refused every character but digits, '.', 'e', 'E', '+' and '-' and a leading sign, where strtod
# and from_chars agree, and errno's ERANGE is from_chars' result_out_of_range.
cat > "$WORK/from_chars_probe.cpp" <<'EOF'
#include <charconv>
int main() {
    const char text[] = "1e-5";
    double value = 0;
    return static_cast<int>(std::from_chars(text, text + 4, value, std::chars_format::general).ec);
}
EOF
if ! $CXX $CXXFLAGS -std=c++20 -c "$WORK/from_chars_probe.cpp" -o "$WORK/from_chars_probe.o" 2>/dev/null; then
  echo "build.sh: this C++ library has no floating-point std::from_chars: using a strtod stand-in"
  cat > "$WORK/from_chars_double.hpp" <<'EOF'
#pragma once
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <string>
#include <system_error>
namespace std {
inline from_chars_result from_chars(const char* first, const char* last, double& value, chars_format) {
    const string text(first, last);
    char* end = nullptr;
    errno = 0;
    const double parsed = strtod(text.c_str(), &end);
    const ptrdiff_t used = end - text.c_str();
    if (used == 0) return {first, errc::invalid_argument};
    if (errno == ERANGE) return {first + used, errc::result_out_of_range};
    value = parsed;
    return {first + used, errc{}};
}
}  // namespace std
EOF
  flags+=(-include "$WORK/from_chars_double.hpp")
fi

# The code under test, once for all harnesses.
mkdir -p "$WORK/model"
objects=()
for src in model/*.cpp; do
  obj="$WORK/model/$(basename "${src%.cpp}").o"
  $CXX $CXXFLAGS "${flags[@]}" -c "$src" -o "$obj"
  objects+=("$obj")
done

# Input sizes as ci/fuzz.sh gives them: model files up to 64 KB, a .npy up to 4 KB, a token list up
# to 1 KB; one input never takes 10 s, the loader never allocates what a header merely claims.
declare -A max_len=([model]=65536 [npy]=4096 [tokens]=1024)
for harness in "${harnesses[@]}"; do
  name=${harness#fuzz_}
  $CXX $CXXFLAGS "${flags[@]}" "libfuzzer/$harness.cpp" "${objects[@]}" $LIB_FUZZING_ENGINE -o "$OUT/$harness"
  cp "libfuzzer/$name.dict" "$OUT/$harness.dict"
  rm -f "$OUT/${harness}_seed_corpus.zip"
  (cd "libfuzzer/corpus/$name" && zip -q -r "$OUT/${harness}_seed_corpus.zip" .)
  cat > "$OUT/$harness.options" <<EOF
[libfuzzer]
max_len = ${max_len[$name]}
timeout = 10
malloc_limit_mb = 512
EOF
done
