// The tensor-parallel group of a rank's layout (vocab/model_layout.h): how many distinct shares
// of each kind its ranks hold (TpShares, TpShareOf), and the tiers' records of the whole group
// (GroupLayout).
#include <numeric>
#include <string>

#include "vocab/model_layout.h"

namespace cachepawl {
namespace {

// The gcd of tp_replicas over the layers stored as `kind`: ranks r and r' with equal r / R hold
// equal bytes of every such layer (R divides each layer's tp_replicas). SSM layers are never
// replicated.
uint32_t KindReplicas(const ModelLayout& l, Kind kind) {
  if (kind == Kind::kMamba || l.tp_size <= 1) return 1;
  uint32_t r = 0;
  for (size_t a = 0; a < l.attention_layers.size(); ++a) {
    if (l.AttentionKind(a) == kind) r = std::gcd(r, l.attention_layers[a].tp_replicas);
  }
  return r == 0 ? 1 : r;
}

}  // namespace

uint32_t ModelLayout::TpShares(Kind kind) const {
  return tp_size <= 1 ? 1 : tp_size / KindReplicas(*this, kind);
}

uint32_t ModelLayout::TpShareOf(Kind kind, uint32_t rank) const {
  return rank / KindReplicas(*this, kind);
}

StatusOr<ModelLayout> GroupLayout(const ModelLayout& rank) {
  if (rank.tp_size <= 1) return rank;
  ModelLayout group = rank;
  group.tp_rank = 0;
  auto widen = [&](uint64_t v, uint64_t n) -> StatusOr<uint64_t> {
    if (v > UINT64_MAX / n) {
      return Status::InvalidArgument("tp_size: " + std::to_string(rank.tp_size) +
                                     " (the group's records of layout '" + rank.model +
                                     "' overflow 64 bits)");
    }
    return v * n;
  };
  for (size_t i = 0; i < group.attention_layers.size(); ++i) {
    AttentionLayerSpec& a = group.attention_layers[i];
    CACHEPAWL_ASSIGN_OR_RETURN(const uint64_t heads,
                               widen(a.num_kv_heads, rank.TpShares(rank.AttentionKind(i))));
    if (heads > UINT32_MAX) return widen(UINT64_MAX, 2).status();
    a.num_kv_heads = static_cast<uint32_t>(heads);
  }
  const uint64_t n = rank.TpShares(Kind::kMamba);
  for (SsmLayerSpec& s : group.ssm_layers) {
    if (!s.conv_shape.empty()) {
      CACHEPAWL_ASSIGN_OR_RETURN(s.conv_shape[0], widen(s.conv_shape[0], n));
    }
    if (!s.ssm_shape.empty()) {
      CACHEPAWL_ASSIGN_OR_RETURN(s.ssm_shape[0], widen(s.ssm_shape[0], n));
    }
  }
  CACHEPAWL_RETURN_IF_ERROR(group.Validate().WithContext("the tensor-parallel group's layout"));
  return group;
}

}  // namespace cachepawl
