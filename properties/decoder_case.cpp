// properties/decoder_case.cpp — the DecoderCase generator.
#include "properties/decoder_case.hpp"

#include <algorithm>
#include <ostream>
#include <sstream>

#include "attncheck/error.hpp"
#include "properties/stream.hpp"
#include "reference/decoder_grad.hpp"

namespace attncheck::properties {

std::vector<int> DecoderCase::tokens() const {
    Stream rng(data_seed);
    std::vector<int> t(static_cast<std::size_t>(tokens_len));
    for (int& x : t) x = rng.integer(0, config.vocab_size - 1);
    return t;
}

std::optional<Memory> DecoderCase::memory() const {
    if (!config.cross_attention) return std::nullopt;
    Stream rng(std::uint64_t(data_seed) ^ 0x6D656D6F7279ull);  // "memory": its own stream
    Memory m;
    m.rows = memory_rows;
    m.valid_len = memory_valid;
    m.data.resize(std::size_t(memory_rows) * std::size_t(config.d_model));
    for (float& x : m.data) x = float(rng.normal());
    return m;
}

std::string describe(const DecoderCase& c) {
    const ModelConfig& m = c.config;
    std::ostringstream s;
    s << "model V=" << m.vocab_size << " d=" << m.d_model << " h=" << m.n_heads << " f=" << m.d_ff
      << " L=" << m.n_layers << " N=" << m.max_len << " norm=" << to_string(m.norm)
      << " cross=" << (m.cross_attention ? "true" : "false") << " pos=" << to_string(m.positional)
      << " act=" << to_string(m.activation) << " embed_scale=" << (m.embed_scale_sqrt_d ? "sqrt_d" : "1")
      << " tie=" << (m.tie_embeddings ? "true" : "false");
    if (m.is_version2()) {
        s << " n_kv_heads=" << m.kv_heads() << " attn_window=" << m.attn_window;
        if (m.positional == Positional::rope) s << " rope_theta=" << m.rope_theta;
    }
    s << " model_seed=" << c.model_seed
      << "; T=" << c.tokens_len;
    if (m.cross_attention) s << " S=" << c.memory_rows << " memory_valid_len=" << c.memory_valid;
    s << " data_seed=" << c.data_seed << " tokens=[";
    const auto t = c.tokens();
    for (std::size_t i = 0; i < t.size(); ++i) s << (i ? "," : "") << t[i];
    s << "]";
    return s.str();
}

void showValue(const DecoderCase& c, std::ostream& os) { os << describe(c); }

rc::Gen<DecoderCase> gen_decoder_case(const DecoderCaseOptions& o) {
    return gen_decoder_case(o, KernelDeclaration{}, false);
}

namespace {

// The head width of a model for a kernel that declares d: `drawn` when d allows it (as the key
// and the value width), else one of the allowed widths up to 128 (the smallest allowed one when
// none is that small), drawn.
int fit_head_dim(int drawn, const KernelDeclaration& d) {
    const auto allowed = [&](int w) { return decoder_width_allowed(d, w); };
    if (allowed(drawn)) return drawn;
    std::vector<int> widths;
    for (int w = 1; w <= 128; ++w)
        if (allowed(w)) widths.push_back(w);
    if (widths.empty()) {
        for (int w = 129; w <= 4096 && widths.empty(); ++w)
            if (allowed(w)) widths.push_back(w);
    }
    if (widths.empty()) return drawn;  // decoder_unavailable() rules such a declaration out
    return *rc::gen::elementOf(widths).as("declared head_dim");
}

bool trainable(const ModelConfig& c) {
    try {
        reference::check_trainable(c);
        return true;
    } catch (const InputError&) {
        return false;
    }
}

// Whether the training step takes any version 2 feature (tried alone on the default config):
// trainable cases draw them only then, so a counterexample lists no feature the case lacks.
bool some_version2_trainable() {
    static const bool some = [] {
        ModelConfig gqa, window, rope;
        gqa.n_kv_heads = 1;
        window.attn_window = 1;
        rope.positional = Positional::rope;
        return trainable(gqa) || trainable(window) || trainable(rope);
    }();
    return some;
}

// The version 2 features of m that the training step refuses, each tried alone on the version 1
// config v1, put back to v1's (so that a feature the step gains is drawn without a change here).
void keep_trainable(ModelConfig& m, const ModelConfig& v1) {
    ModelConfig one = v1;
    one.n_kv_heads = m.n_kv_heads;
    if (!trainable(one)) m.n_kv_heads = v1.n_kv_heads;
    one = v1;
    one.attn_window = m.attn_window;
    if (!trainable(one)) m.attn_window = v1.attn_window;
    one = v1;
    one.positional = m.positional;
    one.rope_theta = m.rope_theta;
    if (!trainable(one)) m.positional = v1.positional, m.rope_theta = v1.rope_theta;
}

}  // namespace

bool decoder_width_allowed(const KernelDeclaration& d, int w) { return d.allows_head_dim(w) && d.allows_value_dim(w, w); }

bool decoder_can_cross(const KernelDeclaration& d, bool v2) { return d.non_causal && (d.padding || v2); }

int decoder_max_len(const KernelDeclaration& d) {
    int n = 1 << 30;
    if (d.max_q_len) n = std::min(n, d.max_q_len);
    if (d.max_kv_len) n = std::min(n, d.max_kv_len);
    return n;
}

rc::Gen<DecoderCase> gen_decoder_case(const DecoderCaseOptions& o, const KernelDeclaration& decl, bool v2) {
    return rc::gen::exec([o, decl, v2] {
        using namespace rc;
        DecoderCase c;
        ModelConfig& m = c.config;
        const int min_t = std::max(1, o.min_tokens);
        // Shrinks towards the small tier (rc::gen::element shrinks towards its first value).
        const bool large = !o.trainable && o.large_percent > 0 &&
                           *gen::resize(100, gen::inRange(0, 100)).as("large tier (< large_percent)") < o.large_percent;
        if (large) {
            // (d_model, heads): head_dim 32 or 64, d_model across the 32-column panels and up to
            // the 256-deep K block; d_ff and vocab around panel multiples and past 256.
            const auto dh = *gen::element(std::pair{64, 2}, std::pair{64, 1}, std::pair{96, 3}, std::pair{128, 2},
                                          std::pair{128, 4}, std::pair{192, 3}, std::pair{256, 4}, std::pair{256, 8})
                                 .as("(d_model, n_heads)");
            m.d_model = dh.first;
            m.n_heads = dh.second;
            m.vocab_size = *gen::resize(100, gen::weightedOneOf<int>({{2, gen::element(31, 32, 33, 64, 65, 97)}, {1, gen::inRange(2, 101)}}))
                                .as("vocab_size");
            m.d_ff = *gen::resize(100, gen::weightedOneOf<int>({{2, gen::element(255, 256, 257, 384, 511, 512)}, {1, gen::inRange(1, 513)}}))
                          .as("d_ff");
            m.n_layers = *gen::inRange(1, 3).as("n_layers");
            m.max_len = *gen::resize(100, gen::weightedOneOf<int>({{2, gen::element(80, 145, 160)}, {1, gen::inRange(std::max(min_t, 2), 161)}}))
                             .as("max_len");
        } else {
            m.vocab_size = *gen::inRange(2, 33).as("vocab_size");
            m.n_heads = *gen::inRange(1, 4).as("n_heads");
            m.d_model = m.n_heads * *gen::inRange(1, 7).as("head_dim");
            m.d_ff = *gen::inRange(1, 25).as("d_ff");
            m.n_layers = *gen::inRange(1, 3).as("n_layers");
            m.max_len = *gen::inRange(std::max(min_t, 2), o.trainable ? kTrainableMaxLen + 1 : 25).as("max_len");
        }
        // Within the declaration (the draws above unchanged, so a default declaration's cases
        // are the same): heads, head width, lengths.
        if (decl.max_heads && m.n_heads > decl.max_heads) {
            const int hd = m.head_dim();
            m.n_heads = decl.max_heads;
            m.d_model = m.n_heads * hd;
        }
        if (const int hd = fit_head_dim(m.head_dim(), decl); hd != m.head_dim()) m.d_model = m.n_heads * hd;
        m.max_len = std::max(std::min(m.max_len, decoder_max_len(decl)), min_t);
        m.norm = *gen::element(Norm::post, Norm::pre).as("norm");
        // The training step's cross-attention calls are non-causal, one sequence at a time with
        // kv_len = its memory's valid length (optimized/train_attention.cpp): no kv_lens needed.
        if (o.trainable)
            m.cross_attention = decl.non_causal && *gen::arbitrary<bool>().as("cross_attention");
        else
            m.cross_attention = o.need_cross || *gen::arbitrary<bool>().as("cross_attention");
        if (!o.trainable && !decoder_can_cross(decl, v2)) m.cross_attention = o.need_cross;
        m.positional = *gen::element(Positional::sinusoidal, Positional::learned).as("positional");
        m.activation = *gen::element(Activation::relu, Activation::gelu, Activation::gelu_tanh).as("activation");
        m.embed_scale_sqrt_d = *gen::arbitrary<bool>().as("embed_scale_sqrt_d");
        m.tie_embeddings = *gen::arbitrary<bool>().as("tie_embeddings");
        c.model_seed = *gen::arbitrary<std::uint32_t>().as("model_seed");
        // The large tier mostly fills its max_len (that is where the row blocks are crossed).
        c.tokens_len = large ? *gen::resize(100, gen::weightedOneOf<int>({{1, gen::just(m.max_len)},
                                                                          {1, gen::inRange(min_t, m.max_len + 1)}}))
                                    .as("T")
                             : *gen::inRange(min_t, m.max_len + 1).as("T");
        if (m.cross_attention) {
            // The large tier's memory crosses a 64-key tile of the cross-attention call.
            c.memory_rows = *gen::inRange(o.need_memory_padding ? 2 : 1, large ? 71 : 9).as("S");
            if (decl.max_kv_len) c.memory_rows = std::max(std::min(c.memory_rows, decl.max_kv_len), o.need_memory_padding ? 2 : 1);
            c.memory_valid = o.need_memory_padding ? *gen::inRange(0, c.memory_rows).as("memory_valid_len < S")
                                                   : *gen::inRange(0, c.memory_rows + 1).as("memory_valid_len");
        }
        c.data_seed = *gen::arbitrary<std::uint32_t>().as("data_seed");
        // MODEL.md "Version 2 additions" in a share of the cases, drawn last so that the draws
        // above (and so every version 1 case) are unchanged; shrinks towards version 1.
        const ModelConfig v1 = m;
        if ((!o.trainable || some_version2_trainable()) &&
            *gen::resize(100, gen::inRange(0, 100)).as("version 2 (< 40)") < 40) {
            // n_kv_heads: 0 (the key absent), n_heads, or mostly a proper divisor (grouped heads).
            std::vector<int> proper;
            for (int k = 1; k < m.n_heads; ++k)
                if (m.n_heads % k == 0) proper.push_back(k);
            m.n_kv_heads = proper.empty()
                               ? *gen::element(0, m.n_heads).as("n_kv_heads")
                               : *gen::weightedOneOf<int>({{1, gen::element(0, m.n_heads)}, {3, gen::elementOf(proper)}})
                                      .as("n_kv_heads");
            // Windows of 0 (each row alone) to past the sequence (no key hidden), mostly short.
            m.attn_window = *gen::weightedOneOf<int>({{1, gen::just(-1)}, {3, gen::element(0, 1, 2, 3)},
                                                      {1, gen::inRange(0, m.max_len + 1)}})
                                 .as("attn_window");
            if (m.head_dim() % 2 == 0 && *gen::arbitrary<bool>().as("rope")) {
                m.positional = Positional::rope;
                m.rope_theta = *gen::element(10000.0, 100.0, 1e6).as("rope_theta");
            }
            // A version 1 kernel sees windows and grouped heads as plain per-row, per-head
            // problems (attention_policy.hpp); a version 2 kernel sees them as such.
            if (v2 && !decl.window) m.attn_window = -1;
            if (v2 && !decl.gqa && m.n_kv_heads != 0) m.n_kv_heads = m.n_heads;
        }
        if (o.trainable) keep_trainable(m, v1);
        return c;
    });
}

}  // namespace attncheck::properties
