// The names of StoreOptions' policies (vocab/store_options.h). StoreOptions::Validate,
// which applies the remote tier's own rules, is in store/store_options_validate.cc.
#include "vocab/store_options.h"

namespace cachepawl {

const char* WritePolicyName(WritePolicy p) {
  switch (p) {
    case WritePolicy::kWriteThrough:
      return "write_through";
    case WritePolicy::kWriteThroughSelective:
      return "write_through_selective";
    case WritePolicy::kWriteBack:
      return "write_back";
  }
  return "unknown";
}

const char* EvictionPolicyName(EvictionPolicy p) {
  switch (p) {
    case EvictionPolicy::kLru:
      return "lru";
    case EvictionPolicy::kHybrid:
      return "hybrid";
  }
  return "unknown";
}

}  // namespace cachepawl
