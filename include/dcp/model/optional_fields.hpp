#pragma once
/// \file
/// The model's optional fields (DESIGN 4.1's extensions of `transformer_spec`), in one table that
/// every reader and writer walks: the conversion of a user's model type (`to_transformer_spec`,
/// through the `has_optional_*` concepts of `model_concepts.hpp`), the JSON writer and reader
/// (`spec_json.hpp`) and the Python `Model` (keyword arguments and attributes). A field added to
/// `transformer_spec` and to this list is read, written and bound everywhere; its default (the
/// member initialiser) leaves the model as its required fields say, and JSON omits it then.
///
/// `DCP_MODEL_OPTIONAL_FIELDS(X)` calls `X(field)` once per field, in the order JSON writes them.

#define DCP_MODEL_OPTIONAL_FIELDS(X) \
  X(kv_heads)                        \
  X(head_dim)                        \
  X(cross_attention_tokens)          \
  X(experts)                         \
  X(experts_per_token)               \
  X(expert_width)                    \
  X(shared_experts)                  \
  X(vocab)                           \
  X(tied_embeddings)                 \
  X(loss)                            \
  X(window)                          \
  X(windowed_blocks)                 \
  X(value_dim)                       \
  X(q_rank)                          \
  X(kv_rank)                         \
  X(rope_dim)                        \
  X(dense_blocks)
