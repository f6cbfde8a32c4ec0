#include "ipc/protocol.h"

#include <type_traits>

#include "vocab/store_stats.h"

#ifndef CACHEPAWL_VERSION_STRING
#define CACHEPAWL_VERSION_STRING "unknown"
#endif

namespace cachepawl::ipc {

namespace {
constexpr size_t kMaxUnits = 1u << 22;
constexpr size_t kMaxJson = 16u << 20;

Tier GetTier(Reader& r, const char* field, Status* bad) {
  const uint8_t t = r.U8(field);
  if (t > static_cast<uint8_t>(Tier::kRemote) && bad->ok()) {
    *bad = Status::InvalidArgument(std::string(field) + ": tier " + std::to_string(t));
  }
  return static_cast<Tier>(t);
}

std::vector<Tier> GetTiers(Reader& r, const char* field, size_t max, Status* bad) {
  const uint32_t n = r.U32(field);
  std::vector<Tier> out;
  if (n > max) {
    if (bad->ok()) {
      *bad = Status::InvalidArgument(std::string(field) + ": " + std::to_string(n) +
                                     " tiers (at most " + std::to_string(max) + ")");
    }
    return out;
  }
  for (uint32_t i = 0; i < n && r.status().ok(); ++i) out.push_back(GetTier(r, field, bad));
  return out;
}

void PutOptional(Writer& w, const std::optional<uint64_t>& v) {
  w.U8(v ? 1 : 0);
  w.U64(v.value_or(0));
}
std::optional<uint64_t> GetOptional(Reader& r, const char* field) {
  const bool has = r.Bool(field);
  const uint64_t v = r.U64(field);
  if (has) return v;
  if (v != 0)
    r.Invalidate(Status::InvalidArgument(std::string(field) + ": absent, yet " + std::to_string(v) +
                                         " (not 0)"));
  return std::nullopt;
}

Status Done(Reader& r, const Status& bad) {
  Status s = r.Finish();
  return s.ok() ? bad : s;
}
}  // namespace

const char* MsgName(uint16_t type) {
  static const char* const kNames[] = {
      "?",    "Hello",    "HelloOk",   "Refused",        "LookupHashes", "Lock",        "Unlock",
      "Load", "Save",     "Prefetch",  "CancelPrefetch", "Stats",        "Ping",        "Reply",
      "Copy", "CopyDone", "FenceDone", "Pong",           "HashArea",     "LookupInArea"};
  return type <= kMaxMsg ? kNames[type] : "unknown";
}

std::string BuildId() {
  static_assert(std::is_trivially_copyable_v<StoreStats>);
  return std::string("cachepawl ") + CACHEPAWL_VERSION_STRING + " protocol " +
         std::to_string(kProtocolVersion) + " stats " + std::to_string(sizeof(StoreStats));
}

std::string Encode(const Hello& m) {
  Writer w;
  w.U32(m.protocol);
  w.Str(m.build);
  w.Str(m.layout_json);
  w.I64(m.pid);
  w.U8(m.gpu_copies ? 1 : 0);
  w.U32(m.tp_rank);
  return std::move(w.bytes());
}

Status Decode(std::string_view in, Hello* m) {
  Reader r(in);
  m->protocol = r.U32("Hello.protocol");
  if (r.status().ok() && m->protocol != kProtocolVersion) {
    // Nothing past the version is read: another version may lay it out otherwise.
    return Status::Incompatible("protocol version " + std::to_string(m->protocol) +
                                " (this owner speaks " + std::to_string(kProtocolVersion) + ")");
  }
  m->build = r.Str("Hello.build", 1024);
  m->layout_json = r.Str("Hello.layout", kMaxJson);
  m->pid = r.I64("Hello.pid");
  m->gpu_copies = r.Bool("Hello.gpu_copies");
  m->tp_rank = r.U32("Hello.tp_rank");
  return r.Finish();
}

std::string Encode(const HelloOk& m) {
  Writer w;
  w.Str(m.layout_json);
  w.U64(m.arena_bytes);
  w.U64(m.chunk_bytes);
  w.U64(m.max_prompt_tokens);
  w.I64(m.owner_pid);
  return std::move(w.bytes());
}

Status Decode(std::string_view in, HelloOk* m) {
  Reader r(in);
  m->layout_json = r.Str("HelloOk.layout", kMaxJson);
  m->arena_bytes = r.U64("HelloOk.arena_bytes");
  m->chunk_bytes = r.U64("HelloOk.chunk_bytes");
  m->max_prompt_tokens = r.U64("HelloOk.max_prompt_tokens");
  m->owner_pid = r.I64("HelloOk.owner_pid");
  return r.Finish();
}

void PutMatch(Writer& w, const PrefixMatch& m, bool with_hashes) {
  w.Hashes(with_hashes ? std::span<const PageHash>(m.hashes) : std::span<const PageHash>());
  w.U32(m.page_size_tokens);
  w.U64(m.reusable_pages);
  w.U64(m.kv_only_pages);
  w.U64(m.checkpoint_hint_pages);
  w.U32(static_cast<uint32_t>(m.page_tiers.size()));
  for (Tier t : m.page_tiers) w.U8(static_cast<uint8_t>(t));
  w.U8(m.state_tier ? 1 : 0);
  w.U8(static_cast<uint8_t>(m.state_tier.value_or(Tier::kDevice)));
  w.U64(m.window_first_page);
  w.U32(static_cast<uint32_t>(m.window_tiers.size()));
  for (Tier t : m.window_tiers) w.U8(static_cast<uint8_t>(t));
}

PrefixMatch GetMatch(Reader& r, size_t max_pages, std::span<const PageHash> known) {
  PrefixMatch m;
  Status bad;
  m.hashes = r.Hashes("match.hashes", max_pages);
  if (m.hashes.empty()) m.hashes.assign(known.begin(), known.end());
  m.page_size_tokens = r.U32("match.page_size_tokens");
  m.reusable_pages = r.U64("match.reusable_pages");
  m.kv_only_pages = r.U64("match.kv_only_pages");
  m.checkpoint_hint_pages = r.U64("match.checkpoint_hint_pages");
  m.page_tiers = GetTiers(r, "match.page_tiers", max_pages, &bad);
  const bool has_state = r.Bool("match.state_tier");
  const Tier state = GetTier(r, "match.state_tier", &bad);
  if (has_state) {
    m.state_tier = state;
  } else if (state != Tier::kDevice && bad.ok()) {
    bad = Status::InvalidArgument("match.state_tier: absent, yet tier " +
                                  std::to_string(static_cast<int>(state)));
  }
  m.window_first_page = r.U64("match.window_first_page");
  m.window_tiers = GetTiers(r, "match.window_tiers", max_pages, &bad);
  // The store checks the match against its own index (Load, Lock); here only what would make
  // it index past its hashes.
  if (bad.ok() && (m.reusable_pages > m.hashes.size() || m.kv_only_pages > m.hashes.size())) {
    bad = Status::InvalidArgument("match: reusable_pages " + std::to_string(m.reusable_pages) +
                                  ", kv_only_pages " + std::to_string(m.kv_only_pages) +
                                  " but only " + std::to_string(m.hashes.size()) + " hashes");
  }
  if (!bad.ok()) r.Invalidate(bad);
  return m;
}

std::string Encode(const LoadCall& m) {
  Writer w;
  w.U64(m.fence_id);
  PutMatch(w, m.match);
  w.U64s(m.device_pages);
  PutOptional(w, m.state_slot);
  w.U64(m.opts.first_page);
  w.U8(m.opts.per_layer_fences ? 1 : 0);
  return std::move(w.bytes());
}

Status Decode(std::string_view in, size_t max_pages, LoadCall* m) {
  Reader r(in);
  m->fence_id = r.U64("Load.fence_id");
  m->match = GetMatch(r, max_pages);
  m->device_pages = r.U64s("Load.device_pages", max_pages);
  m->state_slot = GetOptional(r, "Load.device_state_slot");
  m->opts.first_page = r.U64("Load.first_page");
  m->opts.per_layer_fences = r.Bool("Load.per_layer_fences");
  return Done(r, Status::OK());
}

std::string Encode(const SaveCall& m) {
  Writer w;
  w.U64(m.fence_id);
  w.Hashes(m.hashes);
  w.U64(m.first_page);
  w.U64s(m.device_pages);
  PutOptional(w, m.state_slot);
  w.U64(m.state_depth_tokens);
  return std::move(w.bytes());
}

Status Decode(std::string_view in, size_t max_pages, SaveCall* m) {
  Reader r(in);
  m->fence_id = r.U64("Save.fence_id");
  m->hashes = r.Hashes("Save.hashes", max_pages);
  m->first_page = r.U64("Save.first_page");
  m->device_pages = r.U64s("Save.device_pages", max_pages);
  m->state_slot = GetOptional(r, "Save.device_state_slot");
  m->state_depth_tokens = r.U64("Save.state_depth_tokens");
  return Done(r, Status::OK());
}

std::string Encode(const CopyOrder& m) {
  Writer w;
  w.U64(m.fence_id);
  w.U8(static_cast<uint8_t>(m.op.direction));
  w.U8(m.op.per_layer_fences ? 1 : 0);
  w.U32(static_cast<uint32_t>(m.op.units.size()));
  for (const CacheTransferUnit& u : m.op.units) {
    const bool save = m.op.direction == Direction::kSave;
    w.U8(static_cast<uint8_t>(u.kind));
    w.U64(save ? u.dst.slot : u.src.slot);  // the host slot
    w.U64(save ? u.src.slot : u.dst.slot);  // the device slot
  }
  return std::move(w.bytes());
}

Status Decode(std::string_view in, CopyOrder* m) {
  Reader r(in);
  m->fence_id = r.U64("Copy.fence_id");
  const uint8_t dir = r.U8("Copy.direction");
  m->op.per_layer_fences = r.Bool("Copy.per_layer_fences");
  const uint32_t n = r.U32("Copy.units");
  Status bad;
  if (dir > static_cast<uint8_t>(Direction::kLoad)) {
    bad = Status::InvalidArgument("Copy.direction: " + std::to_string(dir));
  } else if (n > kMaxUnits || static_cast<uint64_t>(n) * 17 > in.size()) {
    bad = Status::InvalidArgument("Copy.units: " + std::to_string(n) + " units in " +
                                  std::to_string(in.size()) + " bytes");
  }
  if (!bad.ok()) return bad;
  m->op.direction = static_cast<Direction>(dir);
  const bool save = m->op.direction == Direction::kSave;
  m->op.units.resize(n);
  for (CacheTransferUnit& u : m->op.units) {
    const uint8_t kind = r.U8("Copy.units.kind");
    if (!IsValidKind(kind) && bad.ok()) {
      bad = Status::InvalidArgument("Copy.units.kind: " + std::to_string(kind));
    }
    u.kind = static_cast<Kind>(kind);
    const TierSlot host{Tier::kHost, r.U64("Copy.units.host_slot")};
    const TierSlot device{Tier::kDevice, r.U64("Copy.units.device_slot")};
    u.src = save ? device : host;
    u.dst = save ? host : device;
  }
  return Done(r, bad);
}

std::string Encode(const HashArea& m) {
  Writer w;
  w.U32(m.slots);
  w.U32(m.slot_hashes);
  return std::move(w.bytes());
}

Status Decode(std::string_view in, size_t max_pages, HashArea* m) {
  Reader r(in);
  m->slots = r.U32("HashArea.slots");
  m->slot_hashes = r.U32("HashArea.slot_hashes");
  Status bad;
  if (m->slots == 0 || m->slots > kMaxAreaSlots) {
    bad = Status::InvalidArgument("HashArea.slots: " + std::to_string(m->slots) + " (1 to " +
                                  std::to_string(kMaxAreaSlots) + ")");
  } else if (m->slot_hashes == 0 || m->slot_hashes > max_pages) {
    bad = Status::InvalidArgument("HashArea.slot_hashes: " + std::to_string(m->slot_hashes) +
                                  " (1 to " + std::to_string(max_pages) + ")");
  }
  return Done(r, bad);
}

std::string Encode(const AreaLookup& m) {
  Writer w;
  w.U32(m.slot);
  w.U32(m.hashes);
  return std::move(w.bytes());
}

Status Decode(std::string_view in, const HashArea& area, AreaLookup* m) {
  Reader r(in);
  m->slot = r.U32("LookupInArea.slot");
  m->hashes = r.U32("LookupInArea.hashes");
  Status bad;
  if (area.slots == 0) {
    bad = Status::FailedPrecondition("LookupInArea: this client gave no hash area");
  } else if (m->slot >= area.slots) {
    bad = Status::InvalidArgument("LookupInArea.slot: " + std::to_string(m->slot) +
                                  " (the area has " + std::to_string(area.slots) + " slots)");
  } else if (m->hashes > area.slot_hashes) {
    bad = Status::InvalidArgument("LookupInArea.hashes: " + std::to_string(m->hashes) +
                                  " (a slot holds " + std::to_string(area.slot_hashes) + ")");
  }
  return Done(r, bad);
}

std::string EncodeReply(const Status& s, std::string_view body) {
  Writer w;
  w.StatusOf(s);
  if (s.ok()) w.Raw(body.data(), body.size());
  return std::move(w.bytes());
}

Status DecodeReply(std::string_view in, std::string* body) {
  Reader r(in);
  Status s = r.StatusOf("Reply.status");
  if (!r.status().ok()) return r.status();
  const size_t header = 1 + 4 + s.message().size();
  if (s.ok()) body->assign(in.substr(header));
  return s;
}

}  // namespace cachepawl::ipc
