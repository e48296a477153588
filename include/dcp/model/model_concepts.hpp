#pragma once
/// \file
/// The `model_spec` axis: what the cost model needs to know of a transformer.
///
/// A model of `model_spec` opts in with `using policy_concept = dcp::model_spec_tag;` and has
///   - `m.blocks` (L), `m.hidden` (h), `m.heads`, `m.mlp_width` (f), `m.mlp_matrices` (m: 2 plain, 3 gated),
///   - `m.attention` (an `attention_kind`), `m.text_tokens` (tokens prepended to every sequence),
///   - `m.block_parameters()` (P_b = 4 h^2 + m h f) and `m.parameters()` (L P_b).
/// Laws: every size is positive, `heads` divides `hidden`; factorized_2d models have an even L.
/// Shipped: `dcp::transformer_spec` with presets `cogvideox_5b`, `stdit3_xl`, `llama3_8b`.

#include <concepts>
#include <cstdint>

namespace dcp {

struct model_spec_tag {};

/// How attention spans a sequence (DESIGN section 4).
enum class attention_kind {
  full,           ///< 1D bidirectional attention over all n tokens
  causal,         ///< 1D causal attention (half the FLOPs of full)
  factorized_2d,  ///< half the blocks attend spatially (S), half temporally (T)
};

template <class M>
concept model_spec = std::same_as<typename M::policy_concept, model_spec_tag> &&  //
                     requires(const M& m) {
                       { m.blocks } -> std::convertible_to<int>;
                       { m.hidden } -> std::convertible_to<double>;
                       { m.heads } -> std::convertible_to<int>;
                       { m.mlp_width } -> std::convertible_to<double>;
                       { m.mlp_matrices } -> std::convertible_to<int>;
                       { m.attention } -> std::convertible_to<attention_kind>;
                       { m.text_tokens } -> std::convertible_to<std::int64_t>;
                       { m.block_parameters() } -> std::convertible_to<double>;
                       { m.parameters() } -> std::convertible_to<double>;
                     };

}  // namespace dcp
