// The store policies as the tools' flags name them: --write-policy through|selective|back and
// --policy lru|hybrid.
#pragma once

#include <string>

#include "vocab/store_options.h"

namespace cachepawl::tools {

// "through" / "selective" / "back" -> the write policy; false otherwise.
inline bool ParseWritePolicy(const std::string& text, WritePolicy* policy) {
  if (text == "through") {
    *policy = WritePolicy::kWriteThrough;
  } else if (text == "selective") {
    *policy = WritePolicy::kWriteThroughSelective;
  } else if (text == "back") {
    *policy = WritePolicy::kWriteBack;
  } else {
    return false;
  }
  return true;
}

// The flag's word for `policy` (the inverse of ParseWritePolicy).
inline const char* WritePolicyFlag(WritePolicy policy) {
  switch (policy) {
    case WritePolicy::kWriteThrough:
      return "through";
    case WritePolicy::kWriteThroughSelective:
      return "selective";
    case WritePolicy::kWriteBack:
      return "back";
  }
  return "unknown";
}

// "lru" / "hybrid" -> the eviction policy; false otherwise.
inline bool ParseEvictionPolicy(const std::string& text, EvictionPolicy* policy) {
  for (EvictionPolicy p : {EvictionPolicy::kLru, EvictionPolicy::kHybrid}) {
    if (text == EvictionPolicyName(p)) {
      *policy = p;
      return true;
    }
  }
  return false;
}

}  // namespace cachepawl::tools
