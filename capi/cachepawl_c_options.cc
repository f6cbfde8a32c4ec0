// The C ABI (capi/cachepawl.h): options handles. Every setter checks its value at once by the
// field's rule (store/store_option_rules.h, which StoreOptions::Validate applies too) and names
// the field and value in its error; cachepawl_store_open checks the combination
// (StoreOptions::Validate). Layouts given by preset or JSON are resolved when set.
#include <string>

#include "capi/cachepawl.h"
#include "capi/cachepawl_c_internal.h"
#include "layouts/layout_presets.h"
#include "redis/redis_cluster.h"
#include "store/store_option_rules.h"
#include "tiers/remote_tier.h"

namespace cachepawl::capi {
namespace {

// The policy errors (store/store_option_rules.h) name these constants: the same numbers.
static_assert(CACHEPAWL_WRITE_THROUGH == static_cast<int>(WritePolicy::kWriteThrough));
static_assert(CACHEPAWL_WRITE_THROUGH_SELECTIVE ==
              static_cast<int>(WritePolicy::kWriteThroughSelective));
static_assert(CACHEPAWL_WRITE_BACK == static_cast<int>(WritePolicy::kWriteBack));
static_assert(CACHEPAWL_EVICTION_LRU == static_cast<int>(EvictionPolicy::kLru));
static_assert(CACHEPAWL_EVICTION_HYBRID == static_cast<int>(EvictionPolicy::kHybrid));
static_assert(CACHEPAWL_REMOTE_WRITE_NONE == static_cast<int>(RemoteWritePolicy::kNone));
static_assert(CACHEPAWL_REMOTE_WRITE_THROUGH == static_cast<int>(RemoteWritePolicy::kWriteThrough));
static_assert(CACHEPAWL_REMOTE_WRITE_SELECTIVE == static_cast<int>(RemoteWritePolicy::kSelective));
static_assert(CACHEPAWL_REMOTE_WRITE_ON_EVICT == static_cast<int>(RemoteWritePolicy::kOnEvict));

// Runs `set` on the options after checking the handle.
template <typename Set>
cachepawl_status Setter(const char* fn, cachepawl_options* options, Set&& set) noexcept {
  return Guard(fn, nullptr, [&]() -> Status {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(options, "options"));
    return set(options->options);
  });
}

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

// The setters of the three wait bounds: one rule (CheckWaitMs), one shape.
cachepawl_status SetWaitMs(const char* function, const char* field, uint32_t StoreOptions::*member,
                           cachepawl_options* options, uint32_t ms) {
  return Setter(function, options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(CheckWaitMs(field, ms));
    o.*member = ms;
    return Status::OK();
  });
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
    CACHEPAWL_RETURN_IF_ERROR(CheckPageSizeTokens(page_size_tokens));
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
    CACHEPAWL_RETURN_IF_ERROR(CheckHostBytes(bytes));
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

cachepawl_status cachepawl_options_set_max_prompt_tokens(cachepawl_options* options,
                                                         uint64_t tokens) {
  return Setter("cachepawl_options_set_max_prompt_tokens", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(CheckMaxPromptTokens(tokens));
    o.max_prompt_tokens = tokens;  // against the page size: in Validate, when both are known
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_host_space_wait_ms(cachepawl_options* options, uint32_t ms) {
  return SetWaitMs("cachepawl_options_set_host_space_wait_ms", "host_space_wait_ms",
                   &StoreOptions::host_space_wait_ms, options, ms);
}

cachepawl_status cachepawl_options_set_host_pinning_wait_ms(cachepawl_options* options,
                                                            uint32_t ms) {
  return SetWaitMs("cachepawl_options_set_host_pinning_wait_ms", "host_pinning_wait_ms",
                   &StoreOptions::host_pinning_wait_ms, options, ms);
}

cachepawl_status cachepawl_options_set_stream_wait_ms(cachepawl_options* options, uint32_t ms) {
  return SetWaitMs("cachepawl_options_set_stream_wait_ms", "stream_wait_ms",
                   &StoreOptions::stream_wait_ms, options, ms);
}

cachepawl_status cachepawl_options_set_save_chunk_entries(cachepawl_options* options,
                                                          uint32_t entries) {
  return Setter("cachepawl_options_set_save_chunk_entries", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(CheckSaveChunkEntries(entries));
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
    if (*path == '\0') return Status::InvalidArgument("path: '' (a data file path is needed)");
    o.disk_data_paths.emplace_back(path);
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_disk_queue_depth(cachepawl_options* options,
                                                        uint32_t depth) {
  return Setter("cachepawl_options_set_disk_queue_depth", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(CheckDiskQueueDepth(depth));
    o.disk_queue_depth = depth;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_write_policy(cachepawl_options* options,
                                                    cachepawl_write_policy policy) {
  return Setter("cachepawl_options_set_write_policy", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(CheckWritePolicy(policy));
    o.write_policy = static_cast<WritePolicy>(policy);
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_eviction_policy(cachepawl_options* options,
                                                       cachepawl_eviction_policy policy) {
  return Setter("cachepawl_options_set_eviction_policy", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(CheckEvictionPolicy(policy));
    o.eviction_policy = static_cast<EvictionPolicy>(policy);
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_selective_min_hits(cachepawl_options* options,
                                                          uint32_t hits) {
  return Setter("cachepawl_options_set_selective_min_hits", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(CheckSelectiveMinHits(hits));
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

cachepawl_status cachepawl_options_set_wipe_unreadable_catalog(cachepawl_options* options,
                                                               int32_t wipe) {
  return Setter("cachepawl_options_set_wipe_unreadable_catalog", options, [&](StoreOptions& o) {
    o.wipe_unreadable_catalog = wipe != 0;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_cuda_device(cachepawl_options* options, int32_t device) {
  return Setter("cachepawl_options_set_cuda_device", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(CheckCudaDevice(device));
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
    CACHEPAWL_RETURN_IF_ERROR(CheckStreamPriority("load_stream_priority", load_priority));
    CACHEPAWL_RETURN_IF_ERROR(CheckStreamPriority("write_stream_priority", write_priority));
    o.load_stream_priority = load_priority;
    o.write_stream_priority = write_priority;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_staging_bytes(cachepawl_options* options, uint64_t bytes) {
  return Setter("cachepawl_options_set_staging_bytes", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(CheckStagingBytes(bytes));
    o.staging_bytes = bytes;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_polling(cachepawl_options* options,
                                               uint32_t completion_spin_us, uint32_t wait_spin_us,
                                               int32_t inline_dispatch) {
  return Setter("cachepawl_options_set_polling", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(CheckSpinUs("completion_spin_us", completion_spin_us));
    CACHEPAWL_RETURN_IF_ERROR(CheckSpinUs("wait_spin_us", wait_spin_us));
    o.completion_spin_us = completion_spin_us;
    o.wait_spin_us = wait_spin_us;
    o.inline_dispatch = inline_dispatch != 0;
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
    CACHEPAWL_RETURN_IF_ERROR(CheckRedisAuth("remote.user", user, password));
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
    CACHEPAWL_RETURN_IF_ERROR(CheckRemoteLookupDeadlineMs(ms));
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
    CACHEPAWL_RETURN_IF_ERROR(CheckRemoteWritePolicy(policy));
    o.remote.write_policy = static_cast<RemoteWritePolicy>(policy);
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_remote_selective_min_hits(cachepawl_options* options,
                                                                 uint32_t hits) {
  return Setter("cachepawl_options_set_remote_selective_min_hits", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(CheckRemoteSelectiveMinHits(hits));
    o.remote.selective_min_hits = hits;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_remote_max_queued_writes(cachepawl_options* options,
                                                                uint32_t writes) {
  return Setter("cachepawl_options_set_remote_max_queued_writes", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(CheckRemoteMaxQueuedWrites(writes));
    o.remote.max_queued_writes = writes;
    return Status::OK();
  });
}

cachepawl_status cachepawl_options_set_remote_reader_threads(cachepawl_options* options,
                                                             uint32_t threads) {
  return Setter("cachepawl_options_set_remote_reader_threads", options, [&](StoreOptions& o) {
    CACHEPAWL_RETURN_IF_ERROR(CheckRemoteReaderThreads(threads));
    o.remote.reader_threads = threads;
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
