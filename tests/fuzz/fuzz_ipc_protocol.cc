// Fuzz target: the owner <-> client messages of a shared store (ipc/protocol.h), what an
// attached process (or anything that connects to the owner's socket) sends, and what the owner
// answers. Input: one selector byte, then a message's payload. Properties: every decoder either
// decodes or returns InvalidArgument / Incompatible naming a field, never crashes, never reads
// past its input, and never allocates more than its bounds allow (a hash list by max_pages, a
// Copy's units by its payload's size); what decodes re-encodes to the same bytes (Load, Save,
// Copy, Hello, HelloOk, HashArea, LookupInArea), a decoded match never counts pages past its
// hashes, and a decoded LookupInArea stays inside its area.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ipc/protocol.h"
#include "tests/fuzz/fuzz_util.h"

namespace cachepawl::fuzz {
namespace {

constexpr size_t kMaxPages = 4096;  // an owner's max_prompt_tokens / page size, for the fuzzer

void CheckMatch(const PrefixMatch& m) {
  Check(m.reusable_pages <= m.hashes.size() && m.kv_only_pages <= m.hashes.size(),
        "a decoded match counts pages past its hashes");
  Check(m.hashes.size() <= kMaxPages, "a decoded match holds more hashes than allowed");
}

template <typename T>
void RoundTrip(std::string_view in) {
  T m;
  Status s = ipc::Decode(in, &m);
  if (!s.ok()) {
    Check(s.IsInvalidArgument() || s.IsIncompatible(), "a decode error of another kind");
    Check(!s.message().empty(), "a decode error without a message");
    return;
  }
  Check(ipc::Encode(m) == in, "a decoded message does not re-encode to its bytes");
}

template <typename T>
void RoundTripBounded(std::string_view in) {
  T m;
  Status s = ipc::Decode(in, kMaxPages, &m);
  if (!s.ok()) {
    Check(s.IsInvalidArgument(), "a decode error of another kind");
    return;
  }
  if constexpr (std::is_same_v<T, ipc::LoadCall>) CheckMatch(m.match);
  Check(ipc::Encode(m) == in, "a decoded call does not re-encode to its bytes");
}

}  // namespace
}  // namespace cachepawl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachepawl;
  using namespace cachepawl::fuzz;
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 10) {
    case 0:
      RoundTrip<ipc::Hello>(in);
      break;
    case 1:
      RoundTrip<ipc::HelloOk>(in);
      break;
    case 2:
      RoundTripBounded<ipc::LoadCall>(in);
      break;
    case 3:
      RoundTripBounded<ipc::SaveCall>(in);
      break;
    case 4: {
      ipc::CopyOrder m;
      if (ipc::Decode(in, &m).ok()) {
        Check(ipc::Encode(m) == in, "a decoded Copy does not re-encode to its bytes");
      }
      break;
    }
    case 5: {
      ipc::Reader r(in);
      PrefixMatch m = ipc::GetMatch(r, kMaxPages);
      (void)r.U64("Lock.pages");
      if (r.Finish().ok()) CheckMatch(m);
      break;
    }
    case 6: {
      std::string body;
      (void)ipc::DecodeReply(in, &body);
      break;
    }
    case 8: {
      ipc::HashArea m;
      if (ipc::Decode(in, kMaxPages, &m).ok()) {
        Check(m.slots >= 1 && m.slots <= ipc::kMaxAreaSlots && m.slot_hashes >= 1 &&
                  m.slot_hashes <= kMaxPages,
              "a decoded HashArea out of its bounds");
        Check(ipc::Encode(m) == in, "a decoded HashArea does not re-encode to its bytes");
      }
      break;
    }
    case 9: {
      const ipc::HashArea area{4, 64};
      ipc::AreaLookup m;
      if (ipc::Decode(in, area, &m).ok()) {
        Check(m.slot < area.slots && m.hashes <= area.slot_hashes,
              "a decoded LookupInArea reaches past its area");
        Check(ipc::Encode(m) == in, "a decoded LookupInArea does not re-encode to its bytes");
      }
      break;
    }
    default: {
      ipc::Reader r(in);
      auto hashes = r.Hashes("LookupHashes.hashes", kMaxPages);
      Check(hashes.size() <= kMaxPages, "more hashes than allowed");
      (void)r.Finish();
      break;
    }
  }
  return 0;
}
