#include "store/disk_write_policy.h"

namespace cachepawl {

std::unique_ptr<DiskWritePolicy> DiskWritePolicy::Make(WritePolicy policy,
                                                       uint32_t selective_min_hits) {
  switch (policy) {
    case WritePolicy::kWriteThroughSelective:
      return std::make_unique<SelectiveWritePolicy>(selective_min_hits);
    case WritePolicy::kWriteBack:
      return std::make_unique<WriteBackPolicy>();
    case WritePolicy::kWriteThrough:
      break;
  }
  return std::make_unique<WriteThroughPolicy>();
}

}  // namespace cachepawl
