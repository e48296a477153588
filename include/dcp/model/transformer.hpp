#pragma once
/// \file
/// `transformer_spec`: the shipped `model_spec`, with the presets of DESIGN section 4.

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>

#include <dcp/error.hpp>
#include <dcp/model/model_concepts.hpp>

namespace dcp {

/// A stack of L identical transformer blocks (attention + MLP). A regular value.
struct transformer_spec {
  using policy_concept = model_spec_tag;

  std::string name = "custom";
  int blocks = 1;           ///< L
  std::int64_t hidden = 1;  ///< h
  int heads = 1;
  std::int64_t mlp_width = 1;  ///< f
  int mlp_matrices = 2;        ///< m: 2 plain MLP, 3 gated (SwiGLU)
  attention_kind attention = attention_kind::full;
  std::int64_t text_tokens = 0;  ///< prepended to every sequence (1D models only)

  /// P_b = 4 h^2 + m h f.
  constexpr double block_parameters() const noexcept {
    const double h = static_cast<double>(hidden);
    return 4.0 * h * h + mlp_matrices * h * static_cast<double>(mlp_width);
  }
  /// P = L P_b.
  constexpr double parameters() const noexcept { return blocks * block_parameters(); }
  /// Tokens this model processes for a sample of shape T x S.
  constexpr std::int64_t tokens_of(std::int64_t frames, std::int64_t spatial) const noexcept {
    return frames * spatial + text_tokens;
  }

  friend bool operator==(const transformer_spec&, const transformer_spec&) = default;
};

inline const char* to_string(attention_kind k) noexcept {
  switch (k) {
    case attention_kind::full: return "full";
    case attention_kind::causal: return "causal";
    case attention_kind::factorized_2d: return "factorized_2d";
  }
  return "?";
}

inline std::ostream& operator<<(std::ostream& os, const transformer_spec& m) {
  return os << "transformer_spec{" << m.name << ", L=" << m.blocks << ", h=" << m.hidden << ", heads=" << m.heads
            << ", f=" << m.mlp_width << ", m=" << m.mlp_matrices << ", " << to_string(m.attention)
            << ", text=" << m.text_tokens << "}";
}

/// The transformer of any `model_spec`: its sizes, attention and text tokens (and its name when
/// it has one), so a user's own model type works wherever dcp needs a `transformer_spec` (the
/// analytic cost model).
template <model_spec M>
transformer_spec to_transformer_spec(const M& m) {
  if constexpr (std::is_convertible_v<const M&, transformer_spec>) {
    return transformer_spec(m);
  } else {
    transformer_spec t;
    if constexpr (requires { std::string(m.name); }) t.name = std::string(m.name);
    t.blocks = static_cast<int>(m.blocks);
    t.hidden = static_cast<std::int64_t>(m.hidden);
    t.heads = static_cast<int>(m.heads);
    t.mlp_width = static_cast<std::int64_t>(m.mlp_width);
    t.mlp_matrices = static_cast<int>(m.mlp_matrices);
    t.attention = m.attention;
    t.text_tokens = static_cast<std::int64_t>(m.text_tokens);
    return t;
  }
}

/// Throws a `dcp::error` naming the field unless `m` keeps the laws of `model_spec`.
inline void validate(const transformer_spec& m) {
  auto need = [&](bool ok, const std::string& what) {
    check(ok, errc::invalid_argument, [&] { return "model '" + m.name + "': " + what; });
  };
  need(m.blocks > 0, "blocks = " + std::to_string(m.blocks) + " must be positive");
  need(m.hidden > 0, "hidden = " + std::to_string(m.hidden) + " must be positive");
  need(m.heads > 0 && m.hidden % m.heads == 0,
       "heads = " + std::to_string(m.heads) + " must be positive and divide hidden = " + std::to_string(m.hidden));
  need(m.mlp_width > 0, "mlp_width = " + std::to_string(m.mlp_width) + " must be positive");
  need(m.mlp_matrices == 2 || m.mlp_matrices == 3,
       "mlp_matrices = " + std::to_string(m.mlp_matrices) + " must be 2 (plain MLP) or 3 (gated MLP)");
  need(m.text_tokens >= 0, "text_tokens = " + std::to_string(m.text_tokens) + " must not be negative");
  need(m.attention != attention_kind::factorized_2d || m.blocks % 2 == 0,
       "factorized_2d needs an even number of blocks (half spatial, half temporal), got " +
           std::to_string(m.blocks));
}

namespace models {
/// CogVideoX-5B, the paper's 1D model.
inline transformer_spec cogvideox_5b() { return {"cogvideox-5b", 42, 3072, 48, 12288, 2, attention_kind::full, 226}; }
/// STDiT3-XL (Open-Sora), the paper's 2D model: 28 spatial + 28 temporal blocks.
inline transformer_spec stdit3_xl() { return {"stdit3-xl", 56, 1152, 16, 4608, 2, attention_kind::factorized_2d, 0}; }
/// Llama-3 8B for long-context text.
inline transformer_spec llama3_8b() { return {"llama3-8b", 32, 4096, 32, 14336, 3, attention_kind::causal, 0}; }

/// Names of the presets accepted by `preset`.
inline constexpr std::array<std::string_view, 3> preset_names{"cogvideox-5b", "stdit3-xl", "llama3-8b"};

/// The preset called `name`; throws a `dcp::error` listing the presets otherwise.
inline transformer_spec preset(std::string_view name) {
  if (name == "cogvideox-5b") return cogvideox_5b();
  if (name == "stdit3-xl") return stdit3_xl();
  if (name == "llama3-8b") return llama3_8b();
  throw error(errc::invalid_argument,
              "unknown model preset '" + std::string(name) + "'; use one of cogvideox-5b, stdit3-xl, llama3-8b");
}
}  // namespace models

static_assert(model_spec<transformer_spec>);

}  // namespace dcp
