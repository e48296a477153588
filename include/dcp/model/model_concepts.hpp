#pragma once
/// \file
/// The `model_spec` axis: what the cost model needs to know of a transformer.
///
/// A model of `model_spec` opts in with `using policy_concept = dcp::model_spec_tag;` and has
///   - `m.blocks` (L), `m.hidden` (h), `m.heads`, `m.mlp_width` (f), `m.mlp_matrices` (m: 2 plain, 3 gated),
///   - `m.attention` (an `attention_kind`), `m.text_tokens` (tokens prepended to every sequence),
///   - `m.block_parameters()` (P_b = 4 h^2 + m h f) and `m.parameters()` (L P_b).
/// Laws: every size is positive, `heads` divides `hidden`; factorized_2d models have an even L.
/// May have: `m.name`, and any of the optional fields of `DCP_MODEL_OPTIONAL_FIELDS`
/// (`optional_fields.hpp`), each asked through `has_model_name` and `has_optional_<field>`.
/// Shipped: `dcp::transformer_spec`, with the presets of `dcp::models` (`preset(name)`,
/// `preset_names`) and any Hugging Face config.json (`models::from_config`).

#include <concepts>
#include <cstdint>
#include <string>

#include <dcp/concept_diagnosis.hpp>
#include <dcp/model/optional_fields.hpp>
#include <dcp/policy_concepts.hpp>

namespace dcp {

struct model_spec_tag {};

/// How attention spans a sequence (DESIGN section 4).
enum class attention_kind {
  full,           ///< 1D bidirectional attention over all n tokens
  causal,         ///< 1D causal attention (half the FLOPs of full)
  factorized_2d,  ///< half the blocks attend spatially (S), half temporally (T)
};

// The named requirements of `model_spec`, in the order a diagnostic reports them.

/// Opts in: `using policy_concept = dcp::model_spec_tag;`.
template <class M>
concept model_spec_opts_in = opts_in_with<M, model_spec_tag>;
/// Sizes: `blocks`, `hidden`, `heads`, `mlp_width`, `mlp_matrices`.
template <class M>
concept model_spec_sizes = requires(const M& m) {
  { m.blocks } -> std::convertible_to<int>;
  { m.hidden } -> std::convertible_to<double>;
  { m.heads } -> std::convertible_to<int>;
  { m.mlp_width } -> std::convertible_to<double>;
  { m.mlp_matrices } -> std::convertible_to<int>;
};
/// Sequence shape: `attention` (an `attention_kind`) and `text_tokens`.
template <class M>
concept model_spec_attention = requires(const M& m) {
  { m.attention } -> std::convertible_to<attention_kind>;
  { m.text_tokens } -> std::convertible_to<std::int64_t>;
};
/// Parameter counts: `block_parameters()` and `parameters()`.
template <class M>
concept model_spec_parameters = requires(const M& m) {
  { m.block_parameters() } -> std::convertible_to<double>;
  { m.parameters() } -> std::convertible_to<double>;
};

template <class M>
concept model_spec = model_spec_opts_in<M> && model_spec_sizes<M> && model_spec_attention<M> && model_spec_parameters<M>;

/// What a model type may have beyond `model_spec`: a name, and each optional field of the table
/// (`has_optional_kv_heads<M>`, ...; `to_transformer_spec` copies the ones a type has).
template <class M>
concept has_model_name = requires(const M& m) { std::string(m.name); };
#define DCP_DETAIL_HAS_OPTIONAL(f) \
  template <class M>               \
  concept has_optional_##f = requires(const M& m) { m.f; };
DCP_MODEL_OPTIONAL_FIELDS(DCP_DETAIL_HAS_OPTIONAL)
#undef DCP_DETAIL_HAS_OPTIONAL

/// The first requirement of `model_spec` that M misses, as one static_assert (`dcp::scheduler`'s
/// Model); true when M models it.
template <class P>
constexpr bool diagnose_model_spec() {
  if constexpr (false) {
  }
  DCP_DIAGNOSE_UNMET("dcp::scheduler: Model", "model_spec", model_spec_opts_in,
                     "`using policy_concept = dcp::model_spec_tag;`")
  DCP_DIAGNOSE_UNMET("dcp::scheduler: Model", "model_spec", model_spec_sizes,
                     "blocks, hidden, heads, mlp_width, mlp_matrices")
  DCP_DIAGNOSE_UNMET("dcp::scheduler: Model", "model_spec", model_spec_attention, "attention, text_tokens")
  DCP_DIAGNOSE_UNMET("dcp::scheduler: Model", "model_spec", model_spec_parameters, "block_parameters(), parameters()")
  DCP_DIAGNOSE_ALL_LISTED("dcp::scheduler: Model", "model_spec", model_spec, "dcp/model/model_concepts.hpp")
  return model_spec<P>;
}


}  // namespace dcp
