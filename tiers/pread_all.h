// PreadAll: reads one whole byte range of a file with pread(2), resuming after short reads and
// EINTR. The one such loop of the library: the disk tier's record copies (CopyDiskRecord) and
// `cachepawl dump` (tools/dump/dump_store.h) read records and free space through it.
//
// Errors begin with `context` (e.g. "disk record kv:...@16"): the errno's, as
// Status::FromErrno("<context>: pread") gives it (IOError, or NoSpace for ENOSPC), or IOError
// "<context>: the file ends after <n> of <bytes> bytes" when the file ends before the range
// does. On error the bytes of `out` are unspecified.
//
// Thread safety: as pread(2); any thread may call it, the file offset is not used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "vocab/status.h"

namespace cachepawl {

// Reads out.size() bytes of `fd` starting at byte `offset` into `out`.
[[nodiscard]] Status PreadAll(int fd, std::span<std::byte> out, uint64_t offset,
                              std::string_view context);

}  // namespace cachepawl
