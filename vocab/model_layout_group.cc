// GroupLayout (vocab/model_layout.h): the tiers' records of a tensor-parallel group.
#include <string>

#include "vocab/model_layout.h"

namespace cachepawl {

StatusOr<ModelLayout> GroupLayout(const ModelLayout& rank) {
  if (rank.tp_size <= 1) return rank;
  ModelLayout group = rank;
  group.tp_rank = 0;
  const uint64_t n = rank.tp_size;
  auto widen = [&](uint64_t v) -> StatusOr<uint64_t> {
    if (v > UINT64_MAX / n) {
      return Status::InvalidArgument("tp_size: " + std::to_string(n) + " (the group's records " +
                                     "of layout '" + rank.model + "' overflow 64 bits)");
    }
    return v * n;
  };
  for (AttentionLayerSpec& a : group.attention_layers) {
    CACHEPAWL_ASSIGN_OR_RETURN(const uint64_t heads, widen(a.num_kv_heads));
    if (heads > UINT32_MAX) return widen(UINT64_MAX).status();
    a.num_kv_heads = static_cast<uint32_t>(heads);
  }
  for (SsmLayerSpec& s : group.ssm_layers) {
    CACHEPAWL_ASSIGN_OR_RETURN(s.conv_shape.at(0), widen(s.conv_shape.at(0)));
    if (!s.ssm_shape.empty()) {
      CACHEPAWL_ASSIGN_OR_RETURN(s.ssm_shape[0], widen(s.ssm_shape[0]));
    }
  }
  CACHEPAWL_RETURN_IF_ERROR(group.Validate().WithContext("the tensor-parallel group's layout"));
  return group;
}

}  // namespace cachepawl
