// The C ABI (store/cachepawl.h): options handles. Every setter checks its value at once and
// names the field and value in its error; cachepawl_store_open checks the combination
// (StoreOptions::Validate). Layouts given by preset or JSON are resolved when set.
#include <string>

#include "store/cachepawl.h"
#include "store/cachepawl_c_internal.h"
#include "tiers/redis_cluster.h"
#include "tiers/remote_tier.h"

namespace cachepawl::capi {
namespace {

// Runs `set` on the options after checking the handle.
template <typename Set>
cachepawl_status Setter(const char* fn, cachepawl_options* options, Set&& set) noexcept {
  return Guard(fn, nullptr, [&]() -> Status {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(options, "options"));
    return set(options->options);
  });
}

Status Bad(const char* field, const std::string& value, const char* why) {
  return Status::InvalidArgument(std::string(field) + ": " + value + " (" + why + ")");
}

static_assert(CACHEPAWL_EVICTION_LRU == static_cast<int>(EvictionPolicy::kLru));
static_assert(CACHEPAWL_EVICTION_HYBRID == static_cast<int>(EvictionPolicy::kHybrid));

static_assert(CACHEPAWL_REMOTE_WRITE_NONE == static_cast<int>(RemoteWritePolicy::kNone));
static_assert(CACHEPAWL_REMOTE_WRITE_THROUGH == static_cast<int>(RemoteWritePolicy::kWriteThrough));
static_assert(CACHEPAWL_REMOTE_WRITE_SELECTIVE == static_cast<int>(RemoteWritePolicy::kSelective));
static_assert(CACHEPAWL_REMOTE_WRITE_ON_EVICT == static_cast<int>(RemoteWritePolicy::kOnEvict));

// Applies `change` to a copy of the remote options and keeps it when the tier's own checks
// (key_prefix, chunk_bytes, deadline_ms: tiers/remote_tier.h) accept it, so that each remote
// setter fails at once, naming its field. The seeds are checked by their own setter.
template <typename Change>
Status SetRemote(StoreOptions& o, Change&& change) {
  RemoteOptions candidate = o.remote;
  change(candidate);
  RemoteTierOptions tier = ToRemoteTierOptions(candidate);
  tier.redis.seeds = "redis://127.0.0.1:6379";  // syntax only; nothing connects here
  tier.redis.user.clear();
  tier.redis.password.clear();
  CACHEPAWL_RETURN_IF_ERROR(tier.Validate());
  o.remote = std::move(candidate);
  return Status::OK();
}

Status SetLayout(StoreOptions& o, StatusOr<ModelLayout> layout) {
  CACHEPAWL_RETURN_IF_ERROR(layout.status());
  o.layout = std::move(layout).value();
  o.layout_name.clear();
  o.page_size_tokens = o.layout->page_size_tokens;
  return Status::OK();
}

}  // namespace

Status ValidateOptions(const cachepawl_options& options) {
  if (!options.options.layout) {
    return Status::InvalidArgument(
        "options.layout: not set (call cachepawl_options_set_layout_preset, "
        "_set_layout_json_file, _set_layout_json_string or _set_layout)");
  }
  return options.options.Validate();
}

}  // namespace cachepawl::capi

using namespace cachepawl;        // NOLINT(google-build-using-namespace)
using namespace cachepawl::capi;  // NOLINT(google-build-using-namespace)

extern "C" {

cachepawl_status cachepawl_options_new(cachepawl_options** out) {
  ClearOut(out);
  return Guard("cachepawl_options_new", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    *out = new cachepawl_options();
    return Status::OK();
  });
}

void cachepawl_options_free(cachepawl_options* options) { delete options; }

cachepawl_status cachepawl_options_set_layout_preset(cachepawl_options* options, const char* name,
                                                     uint32_t page_size_tokens) {
  return Setter("cachepawl_options_set_layout_preset", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(name, "name"));
    if (page_size_tokens == 0) return Bad("page_size_tokens", "0", "must be > 0");
    return SetLayout(o, LayoutPreset(name, page_size_tokens));
  });
}

cachepawl_status cachepawl_options_set_layout_json_file(cachepawl_options* options,
                                                        const char* path) {
  return Setter("cachepawl_options_set_layout_json_file", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(path, "path"));
    return SetLayout(o, LoadLayoutFile(path));
  });
}

cachepawl_status cachepawl_options_set_layout_json_string(cachepawl_options* options,
                                                          const char* json, size_t len) {
  return Setter("cachepawl_options_set_layout_json_string", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(NeedSpan(json, len, "json", "len"));
    return SetLayout(o, ParseLayoutJson(std::string_view(json == nullptr ? "" : json, len)));
  });
}

cachepawl_status cachepawl_options_set_layout(cachepawl_options* options,
                                              const cachepawl_layout* layout) {
  return Setter("cachepawl_options_set_layout", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(layout, "layout"));
    return SetLayout(o, layout->layout);
  });
}

cachepawl_status cachepawl_options_set_host_bytes(cachepawl_options* options, uint64_t bytes) {
  return Setter("cachepawl_options_set_host_bytes", options, [&](StoreOptions& o) {
    if (bytes == 0 || bytes % 4096 != 0) {
      return Bad("host_bytes", std::to_string(bytes), "must be > 0 and a multiple of 4096");
    }
    o.host_bytes = bytes;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_host_free_target_bytes(cachepawl_options* options,
                                                              uint64_t bytes) {
  return Setter("cachepawl_options_set_host_free_target_bytes", options, [&](StoreOptions& o) {
    o.host_free_target_bytes = bytes;  // against host_bytes: in Validate, when both are known
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_save_chunk_entries(cachepawl_options* options,
                                                          uint32_t entries) {
  return Setter("cachepawl_options_set_save_chunk_entries", options, [&](StoreOptions& o) {
    if (entries == 0) return Bad("save_chunk_entries", "0", "must be >= 1");
    o.save_chunk_entries = entries;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_disk_dir(cachepawl_options* options, const char* dir) {
  return Setter("cachepawl_options_set_disk_dir", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(dir, "dir"));
    o.disk_dir = dir;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_disk_bytes(cachepawl_options* options, uint64_t bytes) {
  return Setter("cachepawl_options_set_disk_bytes", options, [&](StoreOptions& o) {
    o.disk_bytes = bytes;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_add_disk_data_path(cachepawl_options* options,
                                                      const char* path) {
  return Setter("cachepawl_options_add_disk_data_path", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(path, "path"));
    if (*path == '\0') return Bad("path", "''", "a data file path is needed");
    o.disk_data_paths.emplace_back(path);
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_disk_queue_depth(cachepawl_options* options,
                                                        uint32_t depth) {
  return Setter("cachepawl_options_set_disk_queue_depth", options, [&](StoreOptions& o) {
    if (depth == 0 || depth > 4096) {
      return Bad("disk_queue_depth", std::to_string(depth), "must be in [1, 4096]");
    }
    o.disk_queue_depth = depth;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_write_policy(cachepawl_options* options,
                                                    cachepawl_write_policy policy) {
  return Setter("cachepawl_options_set_write_policy", options, [&](StoreOptions& o) {
    if (policy < CACHEPAWL_WRITE_THROUGH || policy > CACHEPAWL_WRITE_BACK) {
      return Bad("write_policy", std::to_string(policy),
                 "expected CACHEPAWL_WRITE_THROUGH (0), CACHEPAWL_WRITE_THROUGH_SELECTIVE (1) "
                 "or CACHEPAWL_WRITE_BACK (2)");
    }
    o.write_policy = static_cast<WritePolicy>(policy);
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_eviction_policy(cachepawl_options* options,
                                                       cachepawl_eviction_policy policy) {
  return Setter("cachepawl_options_set_eviction_policy", options, [&](StoreOptions& o) {
    if (policy < CACHEPAWL_EVICTION_LRU || policy > CACHEPAWL_EVICTION_HYBRID) {
      return Bad("eviction_policy", std::to_string(policy),
                 "expected CACHEPAWL_EVICTION_LRU (0) or CACHEPAWL_EVICTION_HYBRID (1)");
    }
    o.eviction_policy = static_cast<EvictionPolicy>(policy);
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_selective_min_hits(cachepawl_options* options,
                                                          uint32_t hits) {
  return Setter("cachepawl_options_set_selective_min_hits", options, [&](StoreOptions& o) {
    if (hits == 0) return Bad("selective_min_hits", "0", "must be > 0");
    o.selective_min_hits = hits;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_wipe_on_layout_mismatch(cachepawl_options* options,
                                                               int32_t wipe) {
  return Setter("cachepawl_options_set_wipe_on_layout_mismatch", options, [&](StoreOptions& o) {
    o.wipe_on_layout_mismatch = wipe != 0;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_cuda_device(cachepawl_options* options, int32_t device) {
  return Setter("cachepawl_options_set_cuda_device", options, [&](StoreOptions& o) {
    if (device < -1) {
      return Bad("cuda_device", std::to_string(device), "must be -1 (CPU mode) or >= 0");
    }
    o.cuda_device = device;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_device_pool_bytes(cachepawl_options* options,
                                                         uint64_t bytes) {
  return Setter("cachepawl_options_set_device_pool_bytes", options, [&](StoreOptions& o) {
    o.device_pool_bytes = bytes;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_stream_priorities(cachepawl_options* options,
                                                         int32_t load_priority,
                                                         int32_t write_priority) {
  return Setter("cachepawl_options_set_stream_priorities", options, [&](StoreOptions& o) {
    for (const auto& [field, priority] : {std::pair{"load_stream_priority", load_priority},
                                          std::pair{"write_stream_priority", write_priority}}) {
      if (priority < -1000 || priority > 1000) {
        return Bad(field, std::to_string(priority), "must be in [-1000, 1000]");
      }
    }
    o.load_stream_priority = load_priority;
    o.write_stream_priority = write_priority;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_staging_bytes(cachepawl_options* options, uint64_t bytes) {
  return Setter("cachepawl_options_set_staging_bytes", options, [&](StoreOptions& o) {
    if (bytes < (1ull << 20)) {
      return Bad("staging_bytes", std::to_string(bytes), "must be at least 1 MiB");
    }
    o.staging_bytes = bytes;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_track_interval_pages(cachepawl_options* options,
                                                            uint32_t pages) {
  return Setter("cachepawl_options_set_track_interval_pages", options, [&](StoreOptions& o) {
    o.track_interval_pages = pages;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_remote_seeds(cachepawl_options* options, const char* seeds) {
  return Setter("cachepawl_options_set_remote_seeds", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(seeds, "seeds"));
    if (*seeds != '\0') {
      CACHEPAWL_RETURN_IF_ERROR(ParseRedisSeeds(seeds).status().WithContext("remote.seeds"));
    }
    o.remote.seeds = seeds;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_remote_auth(cachepawl_options* options, const char* user,
                                                   const char* password) {
  return Setter("cachepawl_options_set_remote_auth", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(user, "user"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(password, "password"));
    if (*user != '\0' && *password == '\0') {
      return Bad("remote.user", std::string("'") + user + "'",
                 "given without a password: AUTH needs both");
    }
    o.remote.user = user;
    o.remote.password = password;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_remote_key_prefix(cachepawl_options* options,
                                                         const char* prefix) {
  return Setter("cachepawl_options_set_remote_key_prefix", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(prefix, "prefix"));
    return SetRemote(o, [&](RemoteOptions& r) { r.key_prefix = prefix; });
  });
}

cachepawl_status cachepawl_options_set_remote_chunk_bytes(cachepawl_options* options,
                                                          uint64_t bytes) {
  return Setter("cachepawl_options_set_remote_chunk_bytes", options, [&](StoreOptions& o) {
    return SetRemote(o, [&](RemoteOptions& r) { r.chunk_bytes = bytes; });
  });
}

cachepawl_status cachepawl_options_set_remote_deadline_ms(cachepawl_options* options, uint32_t ms) {
  return Setter("cachepawl_options_set_remote_deadline_ms", options, [&](StoreOptions& o) {
    return SetRemote(o, [&](RemoteOptions& r) { r.deadline_ms = ms; });
  });
}

cachepawl_status cachepawl_options_set_remote_lookup_deadline_ms(cachepawl_options* options,
                                                                 uint32_t ms) {
  return Setter("cachepawl_options_set_remote_lookup_deadline_ms", options, [&](StoreOptions& o) {
    if (ms == 0 || ms > 10000) {
      return Bad("remote.lookup_deadline_ms", std::to_string(ms), "must be in [1, 10000]");
    }
    o.remote.lookup_deadline_ms = ms;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_remote_ttl_seconds(cachepawl_options* options,
                                                          uint32_t seconds) {
  return Setter("cachepawl_options_set_remote_ttl_seconds", options, [&](StoreOptions& o) {
    o.remote.ttl_seconds = seconds;  // 0: no expiry
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_remote_write_policy(cachepawl_options* options,
                                                           cachepawl_remote_write_policy policy) {
  return Setter("cachepawl_options_set_remote_write_policy", options, [&](StoreOptions& o) {
    if (policy < CACHEPAWL_REMOTE_WRITE_NONE || policy > CACHEPAWL_REMOTE_WRITE_ON_EVICT) {
      return Bad("remote.write_policy", std::to_string(policy),
                 "expected CACHEPAWL_REMOTE_WRITE_NONE (0), CACHEPAWL_REMOTE_WRITE_THROUGH (1), "
                 "CACHEPAWL_REMOTE_WRITE_SELECTIVE (2) or CACHEPAWL_REMOTE_WRITE_ON_EVICT (3)");
    }
    o.remote.write_policy = static_cast<RemoteWritePolicy>(policy);
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_remote_selective_min_hits(cachepawl_options* options,
                                                                 uint32_t hits) {
  return Setter("cachepawl_options_set_remote_selective_min_hits", options, [&](StoreOptions& o) {
    if (hits == 0) return Bad("remote.selective_min_hits", "0", "must be > 0");
    o.remote.selective_min_hits = hits;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_remote_max_queued_writes(cachepawl_options* options,
                                                                uint32_t writes) {
  return Setter("cachepawl_options_set_remote_max_queued_writes", options, [&](StoreOptions& o) {
    if (writes == 0) return Bad("remote.max_queued_writes", "0", "must be > 0");
    o.remote.max_queued_writes = writes;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_validate(const cachepawl_options* options) {
  return Guard("cachepawl_options_validate", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(options, "options"));
    return ValidateOptions(*options);
  });
}

}  // extern "C"
