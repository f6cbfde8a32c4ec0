#include "tools/replay/replay_engine.h"

#include <memory>

namespace cachepawl::tools {

Status ReplayEngineOptions::Validate(uint32_t page_size_tokens) const {
  CACHEPAWL_RETURN_IF_ERROR(ValidateBlockAndPageSize(block_size_tokens, page_size_tokens));
  if (chunk_pages == 0) return Status::InvalidArgument("chunk_pages: 0 (must be > 0)");
  return Status::OK();
}

ReplayEngine::ReplayEngine(Store* store, const ReplayEngineOptions& options)
    : store_(store), options_(options), l1_(store) {
  const ModelLayout& layout = store->layout();
  page_size_ = layout.page_size_tokens;
  hybrid_ = layout.has_ssm();
  kv_ = layout.has_attention();
  page_bytes_ = kv_ ? layout.KvPageBytes() : 0;
  state_bytes_ = hybrid_ ? layout.MambaSlotBytes() : 0;
  full_record_bytes_ = layout.RecordBytes(Kind::kKV);
  window_record_bytes_ = layout.RecordBytes(Kind::kWindowKV);
  window_pages_ = layout.Stores(Kind::kWindowKV) ? layout.WindowPages() : 0;
  for (size_t a = 0; a < layout.attention_layers.size(); ++a) {
    if (layout.AttentionKind(a) != Kind::kWindowKV) continue;
    window_ranges_.push_back(layout.KSegment(a));
    window_ranges_.push_back(layout.VSegment(a));
  }
}

ReplayEngine::~ReplayEngine() = default;

StatusOr<std::unique_ptr<ReplayEngine>> ReplayEngine::Create(Store* store,
                                                             const ReplayEngineOptions& options) {
  if (store == nullptr) return Status::InvalidArgument("store: null");
  const ModelLayout& layout = store->layout();
  CACHEPAWL_RETURN_IF_ERROR(options.Validate(layout.page_size_tokens));
  return std::unique_ptr<ReplayEngine>(new ReplayEngine(store, options));
}

uint64_t ReplayEngine::l1_resident(Kind kind) const { return l1_.resident(kind); }

}  // namespace cachepawl::tools
