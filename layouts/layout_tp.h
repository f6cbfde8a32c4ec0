// Tensor-parallel layouts: the layout one rank of a tp_size-way deployment keeps, from the layout
// of the whole model (tp_size 1: a preset, a layout file, or LayoutFromHfConfig).
//
// The split is the serving engines' (vLLM's MambaStateShapeCalculator and attention layers,
// which SGLang follows; docs/MODELS.md, "Tensor parallelism"), layer by layer:
//   attention (full and sliding): num_kv_heads H. H >= tp_size: H / tp_size heads per rank
//     (tp_size must divide H). H < tp_size: every rank keeps one head, each head replicated on
//     tp_size / H ranks (H must divide tp_size; tp_replicas tp_size / H, rank r holds head
//     r / tp_replicas). MLA: every rank keeps the whole latent (tp_replicas tp_size).
//   mamba2: ssm_shape [heads, head_dim, d_state], conv_shape [d_inner + 2 * n_groups * d_state, W]
//     with d_inner = heads * head_dim (n_groups follows from the shapes). A rank keeps
//     heads / tp_size heads and n_groups / tp_size groups; a single group (n_groups 1) is
//     replicated on every rank. conv [(d_inner + 2 * g * d_state) / tp_size, W] with g = n_groups,
//     or tp_size when the group is replicated; state [heads / tp_size, head_dim, d_state].
//   mamba1: conv [d_inner, W], ssm [d_inner, d_state]: d_inner / tp_size channels per rank.
//   gdn (Gated DeltaNet): ssm [v_heads, k_dim, v_dim], conv [2 * k_heads * k_dim + v_heads * v_dim,
//     W]: k_heads / tp_size and v_heads / tp_size heads per rank.
//   rglru: conv [lru_width, W], ssm [lru_width]: lru_width / tp_size channels per rank.
//   shortconv: conv [hidden, W]: hidden / tp_size channels per rank.
// Every rank's records have the same size; rank r's layout differs from rank 0's only in tp_rank
// (and so the fingerprint), its bytes in which heads and channels they are. Replicated layers
// (tp_replicas > 1) let a group store keep their kind once per share (ModelLayout::TpShares).
//
// Errors: InvalidArgument naming the field, the value and the tp_size, e.g.
// "attention_layers[2].num_kv_heads: 6 (tp_size 4 neither divides it nor is a multiple of it)",
// "ssm_layers[0].ssm_shape[0] (heads): 100 (not divisible by tp_size 8)"; tp_size 0, tp_rank >=
// tp_size, and a layout that is already one rank's (its tp_size is not 1) are refused by name.
//
// Thread safety: the function is pure.
#pragma once

#include <cstdint>

#include "vocab/model_layout.h"
#include "vocab/status.h"

namespace cachepawl {

// Rank `tp_rank` of `whole` split `tp_size` ways. tp_size 1 returns `whole` (rank 0).
[[nodiscard]] StatusOr<ModelLayout> ShardLayout(const ModelLayout& whole, uint32_t tp_size,
                                                uint32_t tp_rank);

// (The tiers' layout of a store for a whole group, GroupLayout, is in vocab/model_layout.h.)

}  // namespace cachepawl
