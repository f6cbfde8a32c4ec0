// DiskMover: the store's NVMe tier (L3) as one object: the bookkeeping of tiers/disk_tier.h
// (data files, extents, RocksDB catalog, LRU, pins, counters) driven by an io_uring ring
// (transfer/io_uring_ring.h) that moves records between pinned host slots and the data files.
//
// A record is RecordSlotBytes(layout, kind) contiguous bytes, the host slot as is: header block
// + payload (tiers/host_memory.h, tiers/disk_record.h), moved with O_DIRECT read_fixed /
// write_fixed (the host memory's regions are registered with the ring). A write is one request
// (pieces of max_io_bytes beyond 1 GiB). A read up to read_piece_bytes is one request; a larger
// one is cut into even pieces of at most read_piece_bytes, read_pieces_in_flight of them in
// flight at once (the next submitted from the completion thread as one lands, before any
// hashing), each verified as it lands: the header when the first piece lands, the XXH3 stream
// fed piece by piece in order (RecordVerifier). So the checksum of a large record overlaps the
// rest of its read instead of following it; the record's fence still waits for its last piece
// and the whole checksum.
//
//   Save: for each {key, parent, host slot}: reserve an extent (evicting LRU records when
//     full), fill the slot's header block (hash, parent, depth, layout fingerprint, lengths,
//     XXH3-64 over header and payload), write, and once the write completed publish the record
//     in the catalog (invariant 4). A key already on disk is not written again.
//   Load: for each {key, host slot}: pin the record, read it into the slot, verify every
//     header field against the key and the layout and the checksum; the record is reported OK
//     only after its last piece landed and the whole checksum matched. A record that fails
//     (short read, I/O error, bad header, bad checksum) is dropped from the catalog, counted,
//     and reported as a miss (Corruption / IOError): the slot's bytes must not be used.
//
// Every batch returns a DiskOp whose fence always fires (invariant 5): on success, on any
// per-record error, on a full disk, and on Close with I/O in flight (Close waits for the I/O).
//
// Usage (the Store):
//   DiskMoverOptions o; o.tier.dir = "/nvme0/cp"; o.tier.capacity_bytes = ..;
//   o.tier.data_paths = {"/nvme0/cp/data", "/nvme1/cp/data"};   // optional: stripe over drives
//   auto disk = DiskMover::Open(o, layout, &host_arena);        // StatusOr<unique_ptr<>>
//   (*disk)->tier().ForEachRecord([&](const DiskRecordInfo& r) {...});  // rebuild the index
//   DiskOp op = (*disk)->Save(writes);                          // returns at once
//   op.fence.OnComplete(...) / op.fence.Wait(); then op.result->records[i].status
//
// Policies stay with the Store: when to write (write-through, write-on-evict) and what to
// remove when the tier is full (tier().Remove, a batch) are the caller's choice; a write that
// finds no room fails NoSpace. Records pinned by in-flight writes are never removed or
// overwritten; a record removed while a read pins it keeps its extent until the read ends.
//
// Why two objects: the bookkeeping is tiers/ (where bytes live); moving bytes and the ring are
// transfer/ (docs/DESIGN.md: transfer depends on tiers, never the reverse).
//
// Thread safety: Save, Load and tier() may be called from any thread concurrently.
// Close (and the destructor) must not race with them from the caller's side; batches already
// submitted complete normally.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <span>
#include <vector>

#include "tiers/disk_tier.h"
#include "tiers/host_memory.h"
#include "transfer/block_io.h"
#include "transfer/transfer_unit.h"
#include "vocab/fence.h"
#include "vocab/model_layout.h"
#include "vocab/page_hash.h"
#include "vocab/status.h"

namespace cachepawl {

struct DiskMoverOptions {
  DiskTierOptions tier;
  // io_uring requests in flight at most (1..kMaxIoUringQueueDepth: transfer/io_uring_ring.h).
  uint32_t queue_depth = 32;
  // The largest single read or write (a 4 KiB multiple, at most kMaxBlockIoBytes = 1 GiB):
  // larger records are moved as several requests (the kernel caps one request near 2 GiB).
  uint32_t max_io_bytes = kMaxBlockIoBytes;
  // Reads of records larger than this are cut into even pieces of at most this many bytes (a
  // 4 KiB multiple; capped at max_io_bytes), verified as they land (see the top of this file).
  // 4 MiB: a 15.3 MiB Mamba state goes as 4 pieces; KV pages (2 MiB and less) go whole.
  uint32_t read_piece_bytes = 4u << 20;
  // Pieces of one record in flight at once (1..4096). 1: the next piece goes out when one
  // lands, so each piece's hashing overlaps the next piece's read. Measured on a virtio disk
  // whose completions arrive only when its queue drains (docs/PERFORMANCE.md, Disk): pieces
  // in flight together land together, and nothing overlaps.
  uint32_t read_pieces_in_flight = 1;
  // Register the host memory's regions as io_uring fixed buffers (read_fixed / write_fixed).
  // When the kernel refuses (RLIMIT_MEMLOCK), plain reads and writes are used and a warning
  // is logged.
  bool register_buffers = true;
  // Test seam: given the io_uring ring, returns the BlockIo to use (e.g. a fault-injecting
  // wrapper around it). Null: the ring itself.
  std::function<std::unique_ptr<BlockIo>(std::unique_ptr<BlockIo>)> wrap_block_io;

  Status Validate() const;
};

// One record to write: the host slot holds the payload (the header block is filled here).
struct DiskWrite {
  DiskKey key;      // depth: tokens through the end of the page (KV) / consumed (Mamba)
  PageHash parent;  // zero for the first page of a chain
  HostSlotId slot = 0;
  // A state of a layout without attention layers: the hashes of the pages before its own
  // (DiskTier::BeginWrite), kept in the catalog with it. Empty otherwise.
  std::vector<PageHash> chain;
};

// One record to read into a host slot of the key's kind.
struct DiskRead {
  DiskKey key;  // KV: depth 0 means "any" (a page hash fixes its depth)
  HostSlotId slot = 0;
};

struct DiskRecordResult {
  // Writes: OK, Busy (a write of the key is in flight), NoSpace, IOError, InvalidArgument
  // (slot of the wrong size), Aborted (closing). Reads: OK, NotFound (not on disk),
  // Corruption (failed verification or short read: dropped), IOError (dropped),
  // InvalidArgument, Aborted.
  Status status;
  uint64_t extent_id = 0;  // the record's Disk TierSlot when OK
  bool existing = false;   // writes: the key was on disk already; nothing was written
  // Reads: the tier holds no record of the key (at the asked depth) after this read: NotFound,
  // or a failed read or verification dropped it. False for OK, InvalidArgument and Aborted.
  bool gone = false;
};

struct DiskBatchResult {
  std::vector<DiskRecordResult> records;  // one per input, same order
  std::vector<CacheTransferUnit> units;   // the moves done (Host->Disk or Disk->Host)
  size_t failed = 0;                      // records whose status is not OK
};

struct DiskOp {
  // Fires when every record of the batch is done: OK when every record is OK, else the first
  // failure's status prefixed with how many failed.
  Fence fence;
  // Complete once `fence` is Ready(); do not read it before.
  std::shared_ptr<const DiskBatchResult> result;
};

class DiskMover {
 public:
  // Opens the tier (see DiskTier::Open for its errors) and its io_uring ring (Unavailable
  // without io_uring). `host` must outlive the mover; its regions are registered with the
  // ring. InvalidArgument when host is null or options are bad.
  static StatusOr<std::unique_ptr<DiskMover>> Open(const DiskMoverOptions& options,
                                                   const ModelLayout& layout, HostMemory* host);
  ~DiskMover();  // Close()
  DiskMover(const DiskMover&) = delete;
  DiskMover& operator=(const DiskMover&) = delete;

  // Writes host slots to disk. Returns at once; per-record outcome in the result.
  DiskOp Save(std::span<const DiskWrite> writes);
  // Reads records into host slots. Returns at once; per-record outcome in the result.
  DiskOp Load(std::span<const DiskRead> reads);

  // Lookup, Remove (a batch), ForEachRecord, stats: see tiers/disk_tier.h.
  DiskTier& tier() { return *tier_; }
  const DiskTier& tier() const { return *tier_; }
  DiskTierStats stats() const { return tier_->stats(); }

  // Waits for the I/O in flight (its fences fire), then closes the tier. Batches submitted
  // afterwards fail with FailedPrecondition. Idempotent.
  Status Close();

 private:
  struct OpState;
  struct RecordIo;
  struct Piece;
  class ReadList;
  explicit DiskMover(HostMemory* host);
  template <typename Item>
  OpState* NewOp(Direction direction, std::span<const Item> items);
  Status CheckSlot(const char* field, size_t i, Kind kind, HostSlotId slot, std::byte** data);
  RecordIo& StartRecord(OpState* op, size_t i, DiskTier::TicketPtr ticket,
                        const DiskRecordInfo& info, HostSlotId slot, std::byte* data);
  void AddRequests(OpState* op, RecordIo& r, BlockIoOp kind, std::vector<BlockIoRequest>* requests);
  void OnCompletions(std::span<const BlockIoCompletion> completions);
  BlockIoRequest PieceRequest(RecordIo& r, BlockIoOp kind);
  void CheckLanded(RecordIo& r);
  void FinishRead(RecordIo& r);
  void RecordDone(OpState* op);
  void FinishOp(OpState* op);
  DiskOp ClosedOp(size_t n);

  HostMemory* const host_;
  std::unique_ptr<DiskTier> tier_;
  std::unique_ptr<BlockIo> io_;
  uint64_t max_io_bytes_ = kMaxBlockIoBytes;
  uint64_t read_piece_bytes_ = kMaxBlockIoBytes;  // min(read_piece_bytes, max_io_bytes)
  uint32_t read_window_ = 1;                      // read_pieces_in_flight
  std::shared_mutex close_mu_;  // shared: a batch being submitted; exclusive: Close
  bool closed_ = false;         // guarded by close_mu_
};

}  // namespace cachepawl
