#include "store/tier_write_policy.h"

namespace cachepawl {

std::unique_ptr<TierWritePolicy> TierWritePolicy::Make(WritePolicy policy,
                                                       uint32_t selective_min_hits) {
  switch (policy) {
    case WritePolicy::kWriteThroughSelective:
      return std::make_unique<SelectiveWritePolicy>(selective_min_hits);
    case WritePolicy::kWriteBack:
      return std::make_unique<WriteOnEvictPolicy>();
    case WritePolicy::kWriteThrough:
      break;
  }
  return std::make_unique<WriteThroughPolicy>();
}

std::unique_ptr<TierWritePolicy> TierWritePolicy::Make(RemoteWritePolicy policy,
                                                       uint32_t selective_min_hits) {
  switch (policy) {
    case RemoteWritePolicy::kNone:
      return nullptr;
    case RemoteWritePolicy::kSelective:
      return std::make_unique<SelectiveWritePolicy>(selective_min_hits);
    case RemoteWritePolicy::kOnEvict:
      return std::make_unique<WriteOnEvictPolicy>();
    case RemoteWritePolicy::kWriteThrough:
      break;
  }
  return std::make_unique<WriteThroughPolicy>();
}

}  // namespace cachepawl
