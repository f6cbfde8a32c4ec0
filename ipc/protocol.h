// The owner <-> client protocol of a shared store (docs/DESIGN.md, "One store, several
// processes"). Every message is one Channel frame (ipc/channel.h); `id` pairs a call with its
// Reply, names a fence (FenceDone) or a copy (Copy, CopyDone).
//
//   client -> owner                         owner -> client
//   Hello (version, build, layout?, rank)   HelloOk (layout, arena geometry; the memfd) | Refused
//   LookupHashes, Lock, Unlock, Stats,      Reply (status, body)
//     Load, Save, Prefetch (each a call)
//   CancelPrefetch (no reply)
//   CopyDone (a Copy's status)              Copy (units this client copies for a Load or Save)
//                                           FenceDone (a Load's, Save's or Prefetch's fence)
//   Ping                                    Pong
//   HashArea (a call; the client's memfd)   Reply
//   LookupInArea (a call)                   Reply (as LookupHashes')
//
// A client may give the owner a hash area once, after HelloOk: a sealed memfd (it cannot
// shrink) of `slots` slots of `slot_hashes` hashes each, which the owner maps read-only. A
// LookupInArea names a slot and a count: the owner copies the hashes out of the slot before it
// looks them up (what the client writes meanwhile changes only its own answer), so a 2,048-page
// lookup crosses the socket in 24 bytes instead of 64 KiB.
//
// A Load, Save or Prefetch names a fence id the client chose; the owner sends the Copy
// messages of that call (each the device <-> host units of one transfer operation, host slots by
// id in the shared arena), waits for their CopyDone, and sends FenceDone once its own fence of
// the call fired. A Save's Copy messages all precede its Reply (the owner submits them before the
// call returns); a Load's may follow it (disk reads come first).
//
// Decoding never trusts the peer: every count is bounded (a hash list by the owner's
// max_prompt_tokens), every field is checked, and a message that does not decode is an
// InvalidArgument naming the field (the owner refuses the call, or drops a client whose frames
// break the format).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ipc/wire.h"
#include "store/store.h"
#include "transfer/transfer_unit.h"

namespace cachepawl::ipc {

inline constexpr uint32_t kProtocolVersion = 4;

enum class Msg : uint16_t {
  kHello = 1,
  kHelloOk,
  kRefused,
  kLookupHashes,
  kLock,
  kUnlock,
  kLoad,
  kSave,
  kPrefetch,
  kCancelPrefetch,
  kStats,
  kPing,
  kReply,
  kCopy,
  kCopyDone,
  kFenceDone,
  kPong,
  kHashArea,
  kLookupInArea,
};
inline constexpr uint16_t kMaxMsg = static_cast<uint16_t>(Msg::kLookupInArea);
inline constexpr uint32_t kMaxAreaSlots = 16;
const char* MsgName(uint16_t type);

// This build's identity: protocol version, library version and the sizes of what crosses the
// channel as raw bytes. A client of another build is refused at Hello.
std::string BuildId();

struct Hello {
  uint32_t protocol = kProtocolVersion;
  std::string build;
  std::string layout_json;  // empty: any layout
  int64_t pid = 0;
  bool gpu_copies = false;  // the client's copies run on a GPU's copy engines (not CPU threads)
  // A tensor-parallel group's store: the rank whose shares this client moves (its layout's
  // tp_rank when it names one; < the owner's tp_size). The owner's HelloOk layout is that rank's.
  uint32_t tp_rank = 0;
};
struct HelloOk {
  std::string layout_json;
  uint64_t arena_bytes = 0, chunk_bytes = 0;
  uint64_t max_prompt_tokens = 0;
  int64_t owner_pid = 0;
};

std::string Encode(const Hello& m);
Status Decode(std::string_view in, Hello* m);
std::string Encode(const HelloOk& m);
Status Decode(std::string_view in, HelloOk* m);

// PrefixMatch: every field; at most `max_pages` hashes and tiers. A LookupHashes reply leaves
// the hashes out (`with_hashes` false: they are the call's): GetMatch then takes `known`.
void PutMatch(Writer& w, const PrefixMatch& m, bool with_hashes = true);
PrefixMatch GetMatch(Reader& r, size_t max_pages, std::span<const PageHash> known = {});

struct LoadCall {
  uint64_t fence_id = 0;
  PrefixMatch match;
  std::vector<uint64_t> device_pages;
  std::optional<uint64_t> state_slot;
  LoadOptions opts;
};
std::string Encode(const LoadCall& m);
Status Decode(std::string_view in, size_t max_pages, LoadCall* m);

struct SaveCall {
  uint64_t fence_id = 0;
  std::vector<PageHash> hashes;
  uint64_t first_page = 0;
  std::vector<uint64_t> device_pages;
  std::optional<uint64_t> state_slot;
  uint64_t state_depth_tokens = 0;
};
std::string Encode(const SaveCall& m);
Status Decode(std::string_view in, size_t max_pages, SaveCall* m);

// The client's hash area (the memfd comes with the frame).
struct HashArea {
  uint32_t slots = 0;        // 1..kMaxAreaSlots
  uint32_t slot_hashes = 0;  // 1..the owner's max pages
};
std::string Encode(const HashArea& m);
Status Decode(std::string_view in, size_t max_pages, HashArea* m);

// A LookupHashes whose hashes are in slot `slot` of the client's hash area.
struct AreaLookup {
  uint32_t slot = 0;
  uint32_t hashes = 0;
};
std::string Encode(const AreaLookup& m);
Status Decode(std::string_view in, const HashArea& area, AreaLookup* m);

// A transfer operation for the client to run; `fence_id` names the call it serves.
struct CopyOrder {
  uint64_t fence_id = 0;
  Operation op;
};
std::string Encode(const CopyOrder& m);
Status Decode(std::string_view in, CopyOrder* m);

// A reply: the call's status, then (when OK) its body.
std::string EncodeReply(const Status& s, std::string_view body = {});
Status DecodeReply(std::string_view in, std::string* body);

}  // namespace cachepawl::ipc
