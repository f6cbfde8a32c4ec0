#include "layouts/layout_tp.h"

#include <string>
#include <vector>

namespace cachepawl {
namespace {

std::string Dims(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Splits one layout's layers `n` ways; each error names the field (`field` + a suffix).
class Sharder {
 public:
  explicit Sharder(uint32_t n) : n_(n) {}

  // `value` / n, or an error naming `field` when n does not divide it.
  StatusOr<uint64_t> Split(const std::string& field, uint64_t value) const {
    if (value % n_ != 0) {
      return Status::InvalidArgument(field + ": " + std::to_string(value) +
                                     " (not divisible by tp_size " + std::to_string(n_) + ")");
    }
    return value / n_;
  }

  Status Attention(const std::string& field, AttentionLayerSpec& a) const {
    if (a.mla) {  // the latent is not split: every rank holds all of it
      a.tp_replicas = n_;
      return Status::OK();
    }
    const uint32_t h = a.num_kv_heads;
    if (h >= n_ && h % n_ == 0) {
      a.num_kv_heads = h / n_;
    } else if (h < n_ && n_ % h == 0) {
      a.num_kv_heads = 1;  // each head replicated on n / h ranks: r holds head r / (n / h)
      a.tp_replicas = n_ / h;
    } else {
      return Status::InvalidArgument(field + ".num_kv_heads: " + std::to_string(h) + " (tp_size " +
                                     std::to_string(n_) +
                                     " neither divides it nor is a multiple of it)");
    }
    return Status::OK();
  }

  Status Ssm(const std::string& field, SsmLayerSpec& s) const {
    auto shape_error = [&](const char* which, const std::vector<uint64_t>& got,
                           const char* expected) {
      return Status::InvalidArgument(field + "." + which + ": " + Dims(got) + " (a " + s.block +
                                     " layer's is " + expected + " to split it)");
    };
    if (s.block == "lightning") {  // no conv; the state [heads, head_dim, head_dim]
      if (s.ssm_shape.size() != 3) {
        return shape_error("ssm_shape", s.ssm_shape, "[heads, head_dim, head_dim]");
      }
      CACHEPAWL_ASSIGN_OR_RETURN(s.ssm_shape[0],
                                 Split(field + ".ssm_shape[0] (heads)", s.ssm_shape[0]));
      return Status::OK();
    }
    if (s.conv_shape.size() != 2)
      return shape_error("conv_shape", s.conv_shape, "[channels, width]");
    const uint64_t conv = s.conv_shape[0];
    if (s.block == "mamba2") {
      if (s.ssm_shape.size() != 3) {
        return shape_error("ssm_shape", s.ssm_shape, "[heads, head_dim, d_state]");
      }
      const uint64_t heads = s.ssm_shape[0], head_dim = s.ssm_shape[1], d_state = s.ssm_shape[2];
      const uint64_t d_inner = heads * head_dim;
      if (conv <= d_inner || (conv - d_inner) % (2 * d_state) != 0) {
        return Status::InvalidArgument(field + ".conv_shape[0]: " + std::to_string(conv) +
                                       " (a mamba2 layer's is d_inner " + std::to_string(d_inner) +
                                       " + 2 * n_groups * d_state " + std::to_string(d_state) +
                                       " with n_groups >= 1)");
      }
      const uint64_t groups = (conv - d_inner) / (2 * d_state);
      if (groups % n_ != 0 && groups != 1) {
        return Status::InvalidArgument(field + " n_groups: " + std::to_string(groups) +
                                       " (not divisible by tp_size " + std::to_string(n_) +
                                       ", and only a single group is replicated)");
      }
      CACHEPAWL_ASSIGN_OR_RETURN(const uint64_t rank_heads,
                                 Split(field + ".ssm_shape[0] (heads)", heads));
      const uint64_t rank_groups = groups % n_ == 0 ? groups / n_ : 1;
      s.ssm_shape[0] = rank_heads;
      s.conv_shape[0] = rank_heads * head_dim + 2 * rank_groups * d_state;
      return Status::OK();
    }
    if (s.block == "gdn") {
      if (s.ssm_shape.size() != 3) {
        return shape_error("ssm_shape", s.ssm_shape, "[v_heads, k_dim, v_dim]");
      }
      const uint64_t v_heads = s.ssm_shape[0], k_dim = s.ssm_shape[1], v_dim = s.ssm_shape[2];
      const uint64_t values = v_heads * v_dim;
      if (conv <= values || (conv - values) % (2 * k_dim) != 0) {
        return Status::InvalidArgument(field + ".conv_shape[0]: " + std::to_string(conv) +
                                       " (a gdn layer's is 2 * k_heads * k_dim " +
                                       std::to_string(k_dim) + " + v_heads * v_dim " +
                                       std::to_string(values) + " with k_heads >= 1)");
      }
      const uint64_t k_heads = (conv - values) / (2 * k_dim);
      CACHEPAWL_ASSIGN_OR_RETURN(const uint64_t rank_v,
                                 Split(field + ".ssm_shape[0] (v_heads)", v_heads));
      CACHEPAWL_ASSIGN_OR_RETURN(const uint64_t rank_k, Split(field + " k_heads", k_heads));
      s.ssm_shape[0] = rank_v;
      s.conv_shape[0] = 2 * rank_k * k_dim + rank_v * v_dim;
      return Status::OK();
    }
    if (s.block == "kda") {
      if (s.ssm_shape.size() != 3 || s.ssm_shape[1] != s.ssm_shape[2] ||
          conv != 3 * s.ssm_shape[0] * s.ssm_shape[1]) {
        return shape_error("ssm_shape", s.ssm_shape,
                           "[heads, head_dim, head_dim] with conv_shape[0] 3 * heads * head_dim");
      }
      CACHEPAWL_ASSIGN_OR_RETURN(const uint64_t rank_heads,
                                 Split(field + ".ssm_shape[0] (heads)", s.ssm_shape[0]));
      s.ssm_shape[0] = rank_heads;
      s.conv_shape[0] = 3 * rank_heads * s.ssm_shape[1];
      return Status::OK();
    }
    if (s.block == "mamba1" && s.ssm_shape.size() == 3) {  // multi-head (Zamba)
      if (s.ssm_shape[0] * s.ssm_shape[1] != conv) {
        return shape_error("ssm_shape", s.ssm_shape,
                           "[heads, head_dim, d_state] (heads * head_dim = conv channels)");
      }
      CACHEPAWL_ASSIGN_OR_RETURN(s.ssm_shape[0],
                                 Split(field + ".ssm_shape[0] (heads)", s.ssm_shape[0]));
      s.conv_shape[0] = s.ssm_shape[0] * s.ssm_shape[1];
      return Status::OK();
    }
    if (s.block == "mamba1") {
      if (s.ssm_shape.size() != 2 || s.ssm_shape[0] != conv) {
        return shape_error("ssm_shape", s.ssm_shape,
                           "[d_inner, d_state] (d_inner = conv channels)");
      }
      CACHEPAWL_ASSIGN_OR_RETURN(s.conv_shape[0], Split(field + ".conv_shape[0] (d_inner)", conv));
      s.ssm_shape[0] = s.conv_shape[0];
      return Status::OK();
    }
    if (s.block == "rglru") {
      if (s.ssm_shape.size() != 1 || s.ssm_shape[0] != conv) {
        return shape_error("ssm_shape", s.ssm_shape, "[lru_width] (lru_width = conv channels)");
      }
      CACHEPAWL_ASSIGN_OR_RETURN(s.conv_shape[0],
                                 Split(field + ".conv_shape[0] (lru_width)", conv));
      s.ssm_shape[0] = s.conv_shape[0];
      return Status::OK();
    }
    // shortconv: a conv state only.
    CACHEPAWL_ASSIGN_OR_RETURN(s.conv_shape[0], Split(field + ".conv_shape[0] (channels)", conv));
    return Status::OK();
  }

 private:
  const uint32_t n_;
};

}  // namespace

StatusOr<ModelLayout> ShardLayout(const ModelLayout& whole, uint32_t tp_size, uint32_t tp_rank) {
  if (tp_size == 0) return Status::InvalidArgument("tp_size: 0 (must be > 0)");
  if (tp_rank >= tp_size) {
    return Status::InvalidArgument("tp_rank: " + std::to_string(tp_rank) + " (must be < tp_size " +
                                   std::to_string(tp_size) + ")");
  }
  if (whole.tp_size != 1) {
    return Status::InvalidArgument(
        "tp_size: " + std::to_string(whole.tp_size) + " (layout '" + whole.model +
        "' is already one rank's; split the whole model's layout, whose tp_size is 1)");
  }
  CACHEPAWL_RETURN_IF_ERROR(whole.Validate());
  ModelLayout rank = whole;
  rank.tp_size = tp_size;
  rank.tp_rank = tp_rank;
  if (tp_size == 1) return rank;
  const Sharder sharder(tp_size);
  for (size_t i = 0; i < rank.attention_layers.size(); ++i) {
    CACHEPAWL_RETURN_IF_ERROR(
        sharder.Attention("attention_layers[" + std::to_string(i) + "]", rank.attention_layers[i]));
  }
  for (size_t i = 0; i < rank.ssm_layers.size(); ++i) {
    CACHEPAWL_RETURN_IF_ERROR(
        sharder.Ssm("ssm_layers[" + std::to_string(i) + "]", rank.ssm_layers[i]));
  }
  CACHEPAWL_RETURN_IF_ERROR(rank.Validate());
  return rank;
}

}  // namespace cachepawl
