// Tests of the call-input checks: token lists, their range, and cross-attention memory.
#include "attncheck/error.hpp"
#include "attncheck/model.hpp"

#include <catch2/catch.hpp>

#include <limits>

using namespace attncheck;
using Catch::Matchers::Contains;

TEST_CASE("tokens: parse_token_list accepts comma-separated non-negative ints", "[tokens]") {
    CHECK(parse_token_list("1,2,3") == std::vector<int>{1, 2, 3});
    CHECK(parse_token_list("0") == std::vector<int>{0});
    CHECK(parse_token_list(" 4 , 5,6 ") == std::vector<int>{4, 5, 6});
    CHECK(parse_token_list("2147483647") == std::vector<int>{2147483647});
}

TEST_CASE("tokens: parse_token_list names the bad entry", "[tokens]") {
    CHECK_THROWS_WITH(parse_token_list(""), Contains("token list is empty"));
    CHECK_THROWS_WITH(parse_token_list("   "), Contains("token list is empty"));
    CHECK_THROWS_WITH(parse_token_list("1,,2"), Contains("entry 1 is empty"));
    CHECK_THROWS_WITH(parse_token_list("1,2,"), Contains("entry 2 is empty"));
    CHECK_THROWS_WITH(parse_token_list(",1"), Contains("entry 0 is empty"));
    CHECK_THROWS_WITH(parse_token_list("1,a,2"), Contains("entry 1 ('a') is not a non-negative integer"));
    CHECK_THROWS_WITH(parse_token_list("1,2,-3"), Contains("entry 2 ('-3') is negative"));
    CHECK_THROWS_WITH(parse_token_list("2147483648"), Contains("entry 0 ('2147483648') does not fit in int32"));
    CHECK_THROWS_WITH(parse_token_list("99999999999999999999999"), Contains("does not fit in int32"));
    CHECK_THROWS_WITH(parse_token_list("1 2"), Contains("entry 0 ('1 2')"));
    CHECK_THROWS_WITH(parse_token_list("1.5"), Contains("('1.5')"));
    CHECK_THROWS_WITH(parse_token_list("+1"), Contains("('+1')"));
    CHECK_THROWS_WITH(parse_token_list("0x10"), Contains("('0x10')"));
}

TEST_CASE("tokens: check_tokens against V and N", "[tokens]") {
    const ModelConfig c = preset_config("tiny");  // V = 32, N = 32
    CHECK_NOTHROW(check_tokens(c, {0, 31, 5}));
    CHECK_NOTHROW(check_tokens(c, std::vector<int>(32, 1)));
    CHECK_THROWS_WITH(check_tokens(c, {}), Contains("empty"));
    CHECK_THROWS_WITH(check_tokens(c, std::vector<int>(40, 1)), Contains("too many tokens: 40 > max_len 32"));
    CHECK_THROWS_WITH(check_tokens(c, {1, 2, 32}), Contains("token 32 at index 2 is out of range [0, 32)"));
    CHECK_THROWS_WITH(check_tokens(c, {-1}), Contains("token -1 at index 0 is out of range [0, 32)"));
}

TEST_CASE("tokens: check_memory", "[tokens][memory]") {
    ModelConfig plain = preset_config("tiny");  // d = 16
    ModelConfig cross = plain;
    cross.cross_attention = true;
    const Memory good{3, 2, std::vector<float>(3 * 16, 0.5f)};
    CHECK_NOTHROW(check_memory(plain, std::nullopt));
    CHECK_NOTHROW(check_memory(cross, good));
    CHECK_NOTHROW(check_memory(cross, Memory{3, 0, good.data}));
    CHECK_NOTHROW(check_memory(cross, Memory{3, 3, good.data}));
    CHECK_THROWS_WITH(check_memory(plain, good), Contains("no cross-attention"));
    CHECK_THROWS_WITH(check_memory(cross, std::nullopt), Contains("no memory was given"));
    CHECK_THROWS_WITH(check_memory(cross, Memory{0, 0, {}}), Contains("memory is empty"));
    CHECK_THROWS_WITH(check_memory(cross, Memory{3, 2, std::vector<float>(3 * 8)}),
                      Contains("expected 3 rows x d_model 16 = 48") && Contains("rows are 8 wide"));
    CHECK_THROWS_WITH(check_memory(cross, Memory{3, 4, good.data}), Contains("valid_len 4 is outside [0, 3]"));
    CHECK_THROWS_WITH(check_memory(cross, Memory{3, -1, good.data}), Contains("valid_len -1"));
    Memory bad = good;
    bad.data[2 * 16 + 5] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH(check_memory(cross, bad), Contains("memory element [2, 5] is not finite"));
}
