// The rules of single StoreOptions fields, each written once. StoreOptions::Validate
// (store/store_options_validate.cc) applies them to a whole StoreOptions; each C ABI setter
// (capi/cachepawl_c_options.cc) applies its field's rule to the value it is given, at once.
// Both therefore report the same text: InvalidArgument "StoreOptions.<field>: <value> (<why>)".
//
// Rules that weigh several fields (host_free_target_bytes against host_bytes, disk_dir needed
// when disk_bytes > 0, a selective_min_hits that matters only under a selective policy) are
// Validate's; the remote tier's own fields (seeds, user, key_prefix, chunk_bytes, deadline_ms)
// are checked by RemoteTierOptions::Validate (tiers/remote_tier.h). Integers of a signed or C
// enum type are taken wide, so that a value outside the C++ field's type is refused, not
// wrapped into range.
#pragma once

#include <cstdint>
#include <string_view>

#include "vocab/status.h"

namespace cachepawl {

// InvalidArgument "StoreOptions.<field>: <value> (<why>)": the form of every rule's error.
[[nodiscard]] Status InvalidStoreOption(std::string_view field, std::string_view value,
                                        std::string_view why);

[[nodiscard]] Status CheckPageSizeTokens(uint32_t tokens);     // > 0
[[nodiscard]] Status CheckHostBytes(uint64_t bytes);           // a non-zero 4096 multiple
[[nodiscard]] Status CheckSaveChunkEntries(uint32_t entries);  // >= 1
[[nodiscard]] Status CheckDiskQueueDepth(uint32_t depth);      // io_uring's [1, 4096]
[[nodiscard]] Status CheckWritePolicy(int64_t policy);         // a WritePolicy
[[nodiscard]] Status CheckEvictionPolicy(int64_t policy);      // an EvictionPolicy
[[nodiscard]] Status CheckSelectiveMinHits(uint32_t hits);     // > 0
[[nodiscard]] Status CheckCudaDevice(int64_t device);          // -1 or a device number
[[nodiscard]] Status CheckStagingBytes(uint64_t bytes);        // >= 1 MiB
[[nodiscard]] Status CheckMaxPromptTokens(uint64_t tokens);    // > 0
// At least one page of `page_size_tokens` (Validate with the options' page size; Open again
// with a layout file's own).
[[nodiscard]] Status CheckMaxPromptTokensHoldAPage(uint64_t tokens, uint32_t page_size_tokens);
// `field`: "completion_spin_us" or "wait_spin_us"; in [0, 1000000].
[[nodiscard]] Status CheckSpinUs(std::string_view field, uint64_t microseconds);
// `field`: "load_stream_priority" or "write_stream_priority"; in [-1000, 1000].
[[nodiscard]] Status CheckStreamPriority(std::string_view field, int64_t priority);

[[nodiscard]] Status CheckRemoteWritePolicy(int64_t policy);       // a RemoteWritePolicy
[[nodiscard]] Status CheckRemoteSelectiveMinHits(uint32_t hits);   // > 0
[[nodiscard]] Status CheckRemoteLookupDeadlineMs(uint32_t ms);     // in [1, 10000]
[[nodiscard]] Status CheckRemoteMaxQueuedWrites(uint32_t writes);  // > 0
[[nodiscard]] Status CheckRemoteReaderThreads(uint32_t threads);   // in [1, 64]
// `field`: "host_space_wait_ms", "host_pinning_wait_ms" or "stream_wait_ms"; at most a day.
[[nodiscard]] Status CheckWaitMs(std::string_view field, uint32_t ms);

}  // namespace cachepawl
