// model/model.cpp — expected_tensors(), the one list of which tensors a config has, and the
// Model's lookup and validation built on it.
#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "model/detail.hpp"

#include <cmath>
#include <string>

namespace attncheck {

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
    const std::size_t V = std::size_t(c.vocab_size), d = std::size_t(c.d_model),
                      f = std::size_t(c.d_ff), N = std::size_t(c.max_len);
    std::vector<TensorSpec> out;
    out.push_back({"embed.weight", {V, d}});
    if (c.positional == Positional::learned) out.push_back({"pos.weight", {N, d}});
    // Self-attention's k and v have n_kv_heads heads of width dk (grouped-query attention,
    // MODEL.md "Version 2 additions"); cross-attention's always have n_heads.
    const std::size_t kv = std::size_t(c.kv_heads()) * std::size_t(c.head_dim());
    const auto attention = [&](const std::string& prefix, std::size_t kv_width) {
        for (const char* p : {"q", "k", "v", "o"}) {
            const bool is_kv = p[0] == 'k' || p[0] == 'v';
            const std::size_t rows = is_kv ? kv_width : d;
            out.push_back({prefix + "." + p + ".weight", {rows, d}});
            out.push_back({prefix + "." + p + ".bias", {rows}});
        }
    };
    const auto layer_norm = [&](const std::string& prefix) {
        out.push_back({prefix + ".weight", {d}});
        out.push_back({prefix + ".bias", {d}});
    };
    for (int i = 0; i < c.n_layers; ++i) {
        const std::string layer = "layers." + std::to_string(i) + ".";
        attention(layer + "self_attn", kv);
        layer_norm(layer + "norm_self");
        if (c.cross_attention) {
            attention(layer + "cross_attn", d);
            layer_norm(layer + "norm_cross");
        }
        out.push_back({layer + "ffn.fc1.weight", {f, d}});
        out.push_back({layer + "ffn.fc1.bias", {f}});
        out.push_back({layer + "ffn.fc2.weight", {d, f}});
        out.push_back({layer + "ffn.fc2.bias", {d}});
        layer_norm(layer + "norm_ffn");
    }
    if (c.norm == Norm::pre) layer_norm("final_norm");
    if (!c.tie_embeddings) out.push_back({"lm_head.weight", {V, d}});
    return out;
}

const Tensor& Model::at(const std::string& name) const {
    const auto it = tensors.find(name);
    if (it == tensors.end()) throw InputError("model has no tensor '" + name + "'");
    return it->second;
}

const Tensor& Model::lm_head() const {
    return at(config.tie_embeddings ? "embed.weight" : "lm_head.weight");
}

void Model::validate() const {
    config.validate();
    std::map<std::string, std::vector<std::size_t>> shapes;
    for (const auto& [name, t] : tensors) shapes[name] = t.shape;
    detail::check_tensor_set(config, shapes, "model");
    for (const auto& [name, t] : tensors) {
        std::size_t n = 1;
        for (std::size_t s : t.shape) n *= s;  // shapes match expected_tensors: no overflow
        if (t.data.size() != n) {
            throw InputError("model: tensor '" + name + "' has " + std::to_string(t.data.size()) +
                             " values, its shape " + detail::shape_string(t.shape) + " needs " +
                             std::to_string(n));
        }
        for (std::size_t i = 0; i < n; ++i) {
            if (!std::isfinite(t.data[i])) {
                // Point at the element: flat index, and (row, column) for a matrix.
                std::string where = "index " + std::to_string(i);
                if (t.shape.size() == 2) {
                    where += " (row " + std::to_string(i / t.shape[1]) + ", column " +
                             std::to_string(i % t.shape[1]) + ")";
                }
                throw InputError("model: tensor '" + name + "' has a non-finite value (" +
                                 std::to_string(t.data[i]) + ") at " + where);
            }
        }
    }
}

namespace detail {

std::string shape_string(const std::vector<std::size_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

void check_tensor_set(const ModelConfig& c,
                      const std::map<std::string, std::vector<std::size_t>>& shapes,
                      const std::string& what) {
    const std::vector<TensorSpec> expected = expected_tensors(c);
    std::map<std::string, const TensorSpec*> by_name;
    for (const TensorSpec& t : expected) by_name[t.name] = &t;
    for (const TensorSpec& t : expected) {
        const auto it = shapes.find(t.name);
        if (it == shapes.end()) {
            throw InputError(what + ": missing tensor '" + t.name + "' (shape " +
                             shape_string(t.shape) + ")");
        }
        if (it->second != t.shape) {
            std::string msg = what + ": tensor '" + t.name + "': shape " +
                              shape_string(it->second) + ", expected " + shape_string(t.shape);
            if (it->second.size() != t.shape.size()) {
                msg += " (rank " + std::to_string(it->second.size()) + ", expected rank " +
                       std::to_string(t.shape.size()) + ")";
            }
            throw InputError(msg);
        }
    }
    for (const auto& [name, shape] : shapes) {
        if (!by_name.count(name)) {
            throw InputError(what + ": unexpected tensor '" + name + "' (shape " +
                             shape_string(shape) + "), not part of a model with this config");
        }
    }
}

}  // namespace detail

}  // namespace attncheck
