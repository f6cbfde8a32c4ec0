#include "transfer/disk_mover.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>

#include "tiers/disk_record.h"
#include "transfer/io_uring_ring.h"
#include "vocab/internal/stage_profile.h"

namespace cachepawl {

// One I/O request of a record (reads above read_piece_bytes and records above max_io_bytes
// take several, consecutive in OpState::pieces).
struct DiskMover::Piece {
  RecordIo* record = nullptr;
  uint64_t offset = 0;  // in the record
  uint32_t len = 0;
  bool landed = false;  // its completion arrived
  int64_t result = 0;   // bytes moved or -errno, once landed
};

// One record of a batch with I/O in flight. Its pieces' completions are handled one at a time
// (BlockIo reports completions on one thread, or, for requests failed at submission, before the
// rest of the record's requests are submitted), so the fields below need no lock.
struct DiskMover::RecordIo {
  OpState* op = nullptr;
  size_t index = 0;  // into the batch
  DiskTier::TicketPtr ticket;
  DiskRecordInfo info;  // reads: what the catalog says; writes: key, parent, extent
  HostSlotId slot = 0;
  std::byte* data = nullptr;
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // writes
  int fd = -1;
  uint32_t first_piece = 0;  // index into OpState::pieces
  uint32_t num_pieces = 0;
  uint32_t submitted = 0;    // pieces handed to the BlockIo (reads: at most the window ahead)
  uint32_t pieces_left = 0;  // pieces not landed yet (submitted or not)
  bool listed = false;       // in the current completion batch's list of reads
  int64_t error = 0;         // first negative result
  uint64_t moved = 0;        // bytes moved by all pieces
  uint64_t started_at = 0;   // profile::Now() when its requests were built (0: not profiled)
  // Reads: pieces [0, checked) were fed to the verifier in order as they landed; `verdict` is
  // the header check's failure, if any; `stopped`: no more pieces are checked (a piece failed
  // or came back short, or the header did not verify: the record fails either way).
  uint32_t checked = 0;
  bool stopped = false;
  Status verdict;
  RecordFault fault = RecordFault::kNone;
  RecordVerifier verifier;
};

struct DiskMover::OpState {
  Direction direction = Direction::kSave;
  FenceCompleter completer;
  std::shared_ptr<DiskBatchResult> result = std::make_shared<DiskBatchResult>();
  std::vector<RecordIo> records;  // sized before any I/O: stable addresses
  std::vector<Piece> pieces;
  // Records still in flight, plus one held by the submitting thread until it is done.
  std::atomic<size_t> remaining{1};
};

// The reads touched by one completion batch: no allocation for the usual handful.
class DiskMover::ReadList {
 public:
  void push_back(RecordIo* r) {
    if (n_ < kInline) {
      inline_[n_++] = r;
    } else {
      more_.push_back(r);
    }
  }
  size_t size() const { return n_ + more_.size(); }
  RecordIo* operator[](size_t i) const { return i < kInline ? inline_[i] : more_[i - kInline]; }

 private:
  static constexpr size_t kInline = 16;
  RecordIo* inline_[kInline];
  size_t n_ = 0;
  std::vector<RecordIo*> more_;
};

namespace {

Status ErrnoStatus(const char* what, const DiskKey& key, int64_t result) {
  const int err = static_cast<int>(-result);
  if (err == ECANCELED) {
    return Status::Aborted(std::string(what) + " of " + key.ToString() +
                           " cancelled: the disk tier is closing");
  }
  if (err == ENOSPC) {
    return Status::NoSpace(std::string(what) + " of " + key.ToString() +
                           ": the drive is full (ENOSPC)");
  }
  return Status::FromErrno(std::string(what) + " of " + key.ToString(), err);
}

}  // namespace

Status DiskMoverOptions::Validate() const {
  CACHEPAWL_RETURN_IF_ERROR(tier.Validate());
  IoUringOptions ring;
  ring.queue_depth = queue_depth;
  CACHEPAWL_RETURN_IF_ERROR(ring.Validate().WithContext("disk"));
  if (max_io_bytes == 0 || max_io_bytes % kDirectIoAlignment != 0 ||
      max_io_bytes > kMaxBlockIoBytes) {
    return Status::InvalidArgument("disk_mover.max_io_bytes: " + std::to_string(max_io_bytes) +
                                   " (must be a multiple of 4096, at most 1 GiB)");
  }
  if (read_piece_bytes == 0 || read_piece_bytes % kDirectIoAlignment != 0) {
    return Status::InvalidArgument(
        "disk_mover.read_piece_bytes: " + std::to_string(read_piece_bytes) +
        " (must be a non-zero multiple of 4096)");
  }
  if (read_pieces_in_flight == 0 || read_pieces_in_flight > 4096) {
    return Status::InvalidArgument("disk_mover.read_pieces_in_flight: " +
                                   std::to_string(read_pieces_in_flight) + " (must be 1..4096)");
  }
  return Status::OK();
}

DiskMover::DiskMover(HostMemory* host) : host_(host) {}

DiskMover::~DiskMover() {
  Status s = Close();
  if (!s.ok()) spdlog::warn("disk mover: close: {}", s.ToString());
}

StatusOr<std::unique_ptr<DiskMover>> DiskMover::Open(const DiskMoverOptions& options,
                                                     const ModelLayout& layout, HostMemory* host) {
  if (host == nullptr)
    return Status::InvalidArgument("host: null (the disk tier needs host memory)");
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<DiskMover> mover(new DiskMover(host));
  mover->max_io_bytes_ = options.max_io_bytes;
  mover->read_piece_bytes_ = std::min(options.read_piece_bytes, options.max_io_bytes);
  mover->read_window_ = options.read_pieces_in_flight;
  CACHEPAWL_ASSIGN_OR_RETURN(mover->tier_, DiskTier::Open(options.tier, layout));
  IoUringOptions ring_options;
  ring_options.queue_depth = options.queue_depth;
  CACHEPAWL_ASSIGN_OR_RETURN(auto ring, IoUringRing::Open(ring_options));
  std::unique_ptr<BlockIo> io = std::move(ring);
  if (options.wrap_block_io) io = options.wrap_block_io(std::move(io));
  if (!io) return Status::InvalidArgument("disk_mover.wrap_block_io returned null");
  mover->io_ = std::move(io);
  DiskMover* self = mover.get();
  mover->io_->SetCompletionHandler(
      [self](std::span<const BlockIoCompletion> c) { self->OnCompletions(c); });
  if (options.register_buffers) {
    const auto regions = host->Regions();
    Status s = mover->io_->RegisterBuffers(regions);
    if (!s.ok()) {
      spdlog::warn(
          "disk mover: host memory not registered with io_uring ({}); using plain "
          "reads and writes",
          s.ToString());
    }
  }
  return mover;
}

DiskOp DiskMover::ClosedOp(size_t n) {
  auto result = std::make_shared<DiskBatchResult>();
  const Status s = Status::FailedPrecondition("disk tier is closed");
  result->records.assign(n, DiskRecordResult{s, 0, false});
  result->failed = n;
  return DiskOp{Fence::Completed(n == 0 ? Status::OK() : s), result};
}

template <typename Item>
DiskMover::OpState* DiskMover::NewOp(Direction direction, std::span<const Item> items) {
  auto* op = new OpState();
  op->direction = direction;
  op->result->records.resize(items.size());
  op->records.resize(items.size());
  // Every piece of every record, reserved up front: stable addresses.
  const uint64_t piece = direction == Direction::kLoad ? read_piece_bytes_ : max_io_bytes_;
  size_t max_pieces = 0;
  for (const Item& item : items) {
    max_pieces += (tier_->record_bytes(item.key.kind) + piece - 1) / piece;
  }
  op->pieces.reserve(max_pieces);
  return op;
}

Status DiskMover::CheckSlot(const char* field, size_t i, Kind kind, HostSlotId slot,
                            std::byte** data) {
  const uint64_t bytes = tier_->record_bytes(kind);
  // Built only for an error (this runs once per record).
  auto where = [&] {
    return std::string(field) + "[" + std::to_string(i) + "].slot " + std::to_string(slot);
  };
  if (bytes == 0 || host_->SlotBytes(slot) != bytes) {
    return Status::InvalidArgument(where() + ": a host slot of " +
                                   std::to_string(host_->SlotBytes(slot)) +
                                   " bytes cannot hold a " + std::string(KindName(kind)) +
                                   " record of " + std::to_string(bytes) + " bytes");
  }
  *data = host_->SlotData(slot);
  if (reinterpret_cast<uintptr_t>(*data) % kDirectIoAlignment != 0) {
    return Status::InvalidArgument(where() + ": not 4 KiB-aligned");
  }
  return Status::OK();
}

DiskMover::RecordIo& DiskMover::StartRecord(OpState* op, size_t i, DiskTier::TicketPtr ticket,
                                            const DiskRecordInfo& info, HostSlotId slot,
                                            std::byte* data) {
  RecordIo& r = op->records[i];
  r.op = op;
  r.index = i;
  r.ticket = std::move(ticket);
  r.info = info;
  r.slot = slot;
  r.data = data;
  r.bytes = tier_->record_bytes(info.key.kind);
  return r;
}

void DiskMover::AddRequests(OpState* op, RecordIo& r, BlockIoOp kind,
                            std::vector<BlockIoRequest>* requests) {
  op->remaining.fetch_add(1, std::memory_order_relaxed);
  r.fd = tier_->files().fd(r.info.extent.file);
  // As few pieces as the limit allows, of even size (4 KiB multiples): a 15.3 MiB record read
  // with 4 MiB pieces goes as 4 x 3.9 MiB, not 3 x 4 MiB + 3.3 MiB.
  const uint64_t limit = kind == BlockIoOp::kRead ? read_piece_bytes_ : max_io_bytes_;
  const uint64_t count = (r.bytes + limit - 1) / limit;
  const uint64_t piece = std::min(limit, ((r.bytes + count - 1) / count + kDirectIoAlignment - 1) /
                                             kDirectIoAlignment * kDirectIoAlignment);
  r.first_piece = static_cast<uint32_t>(op->pieces.size());
  for (uint64_t off = 0; off < r.bytes; off += piece) {
    const auto len = static_cast<uint32_t>(std::min<uint64_t>(piece, r.bytes - off));
    op->pieces.push_back(Piece{&r, off, len});
    ++r.num_pieces;
  }
  r.pieces_left = r.num_pieces;
  r.started_at = profile::Now();
  // Writes go out whole; reads keep at most the window in flight, the rest follow as pieces land.
  const uint32_t first =
      kind == BlockIoOp::kRead ? std::min(r.num_pieces, read_window_) : r.num_pieces;
  while (r.submitted < first) requests->push_back(PieceRequest(r, kind));
}

BlockIoRequest DiskMover::PieceRequest(RecordIo& r, BlockIoOp kind) {
  Piece& p = r.op->pieces[r.first_piece + r.submitted++];
  return BlockIoRequest{kind,
                        r.fd,
                        r.info.extent.offset + p.offset,
                        r.data + p.offset,
                        p.len,
                        reinterpret_cast<uint64_t>(&p)};
}

DiskOp DiskMover::Save(std::span<const DiskWrite> writes) {
  std::shared_lock<std::shared_mutex> guard(close_mu_);
  if (closed_) return ClosedOp(writes.size());
  OpState* op = NewOp(Direction::kSave, writes);
  DiskOp out{op->completer.fence(), op->result};
  DiskBatchResult& result = *op->result;
  std::vector<BlockIoRequest> requests;
  uint64_t pending_bytes = 0;
  for (size_t i = 0; i < writes.size(); ++i) {
    const DiskWrite& w = writes[i];
    DiskRecordResult& rr = result.records[i];
    std::byte* data = nullptr;
    rr.status = CheckSlot("writes", i, w.key.kind, w.slot, &data);
    if (!rr.status.ok()) continue;
    auto plan = tier_->BeginWrite(w.key, w.parent, w.chain);
    if (!plan.ok()) {
      rr.status = plan.status();
      continue;
    }
    if (plan->existing) {
      rr.existing = true;
      rr.extent_id = plan->extent.Id();
      tier_->Count(DiskTier::Counter::kWritesExisting);
      continue;
    }
    DiskRecordInfo info;
    info.key = w.key;
    info.parent = w.parent;
    info.extent = plan->extent;
    RecordIo& r = StartRecord(op, i, std::move(plan->ticket), info, w.slot, data);
    RecordHeader h;
    h.kind = w.key.kind;
    h.hash = w.key.hash;
    h.parent = w.parent;
    h.depth = w.key.depth;
    h.fingerprint = tier_->fingerprint();
    h.payload_bytes = tier_->payload_bytes(w.key.kind);
    h.record_bytes = r.bytes;
    r.checksum = WriteRecordHeader(std::span<std::byte>(data, r.bytes), h);
    AddRequests(op, r, BlockIoOp::kWrite, &requests);
    pending_bytes += r.bytes;
    // Submit in groups so the drive starts while later records are being checksummed.
    if (pending_bytes >= (8u << 20) || requests.size() >= 16) {
      io_->Submit(requests);
      requests.clear();
      pending_bytes = 0;
    }
  }
  if (!requests.empty()) io_->Submit(requests);
  RecordDone(op);  // the submitter's hold
  return out;
}

DiskOp DiskMover::Load(std::span<const DiskRead> reads) {
  const uint64_t setup_start = profile::Now();
  std::shared_lock<std::shared_mutex> guard(close_mu_);
  if (closed_) return ClosedOp(reads.size());
  OpState* op = NewOp(Direction::kLoad, reads);
  DiskOp out{op->completer.fence(), op->result};
  DiskBatchResult& result = *op->result;
  std::vector<BlockIoRequest> requests;
  for (size_t i = 0; i < reads.size(); ++i) {
    const DiskRead& rd = reads[i];
    DiskRecordResult& rr = result.records[i];
    std::byte* data = nullptr;
    rr.status = CheckSlot("reads", i, rd.key.kind, rd.slot, &data);
    if (!rr.status.ok()) continue;
    auto pinned = tier_->BeginRead(rd.key);
    if (!pinned.ok()) {
      if (pinned.status().IsNotFound()) tier_->Count(DiskTier::Counter::kReadMisses);
      rr.status = pinned.status();
      rr.gone = rr.status.IsNotFound();
      continue;
    }
    RecordIo& r = StartRecord(op, i, std::move(pinned->first), pinned->second, rd.slot, data);
    AddRequests(op, r, BlockIoOp::kRead, &requests);
  }
  profile::Add(profile::Stage::kDiskReadSetup, setup_start);
  if (!requests.empty()) {
    profile::ScopedStage submitting(profile::Stage::kDiskReadSubmit);
    io_->Submit(requests);
  }
  RecordDone(op);
  return out;
}

void DiskMover::CheckLanded(RecordIo& r) {
  const Piece* pieces = r.op->pieces.data() + r.first_piece;
  while (r.checked < r.num_pieces && pieces[r.checked].landed) {
    const Piece& p = pieces[r.checked++];
    if (r.stopped) continue;
    // A failed or short piece: the record fails as an I/O error or a short read (FinishRead);
    // nothing after it is worth hashing.
    if (r.error != 0 || p.result != static_cast<int64_t>(p.len)) {
      r.stopped = true;
      continue;
    }
    if (p.offset == 0) {
      RecordExpectation expect;
      expect.key = r.info.key;
      expect.fingerprint = tier_->fingerprint();
      expect.payload_bytes = tier_->payload_bytes(r.info.key.kind);
      expect.record_bytes = r.bytes;
      expect.checksum = r.info.checksum;
      expect.parent = r.info.parent;
      r.verdict = r.verifier.Begin(std::span<const std::byte>(r.data, kRecordHeaderBytes), expect,
                                   &r.fault);
      if (!r.verdict.ok()) {
        r.stopped = true;
        continue;
      }
    }
    r.verifier.Update(std::span<const std::byte>(r.data + p.offset, p.len));
  }
}

void DiskMover::FinishRead(RecordIo& r) {
  DiskRecordResult& rr = r.op->result->records[r.index];
  const DiskKey& key = r.info.key;
  bool ok = false;
  if (r.error != 0) {
    rr.status = ErrnoStatus("disk read", key, r.error);
    tier_->Count(DiskTier::Counter::kReadIoErrors);
  } else if (r.moved != r.bytes) {
    rr.status = Status::Corruption("disk read of " + key.ToString() + ": short read, " +
                                   std::to_string(r.moved) + " of " + std::to_string(r.bytes) +
                                   " bytes (data file truncated?)");
    tier_->Count(DiskTier::Counter::kShortReads);
  } else {
    // Every piece landed whole and was fed in order: the header was checked when the first one
    // landed; what is left is the end of the checksum.
    rr.status = r.verdict.ok() ? r.verifier.Finish(&r.fault) : r.verdict;
    if (r.fault == RecordFault::kHeader) tier_->Count(DiskTier::Counter::kHeaderMismatches);
    if (r.fault == RecordFault::kChecksum) tier_->Count(DiskTier::Counter::kChecksumFailures);
    ok = rr.status.ok();
  }
  if (ok) {
    rr.extent_id = r.info.extent.Id();
    tier_->Count(DiskTier::Counter::kReads);
    tier_->Count(DiskTier::Counter::kReadBytes, r.bytes);
  } else {
    // Whatever landed in the slot is not the record: make sure it cannot pass for one.
    std::memset(r.data, 0, kDiskRecordHeaderUsedBytes);
  }
  // An aborted read (closing) says nothing about the record: keep it.
  const bool aborted = r.error == -ECANCELED;
  tier_->EndRead(r.ticket, ok || aborted);
  rr.gone = !ok && !aborted;
  r.ticket.reset();
}

void DiskMover::OnCompletions(std::span<const BlockIoCompletion> completions) {
  // Pass 1, bookkeeping: reads get their next pieces queued (submitted before any hashing, so
  // the drive stays busy); writes whose every piece landed are collected so that they are
  // published in one catalog batch (invariant 4).
  ReadList reads;
  std::vector<BlockIoRequest> next;
  std::vector<RecordIo*> done;
  for (const BlockIoCompletion& c : completions) {
    Piece* piece = reinterpret_cast<Piece*>(c.tag);
    RecordIo* r = piece->record;
    piece->landed = true;
    piece->result = c.result;
    if (c.result < 0) {
      if (r->error == 0) r->error = c.result;
    } else {
      r->moved += static_cast<uint64_t>(c.result);
    }
    --r->pieces_left;
    if (r->pieces_left == 0 && r->op->direction == Direction::kLoad) {
      profile::Add(profile::Stage::kDiskReadWait, r->started_at);
    }
    if (r->op->direction == Direction::kSave) {
      if (r->pieces_left == 0) done.push_back(r);
      continue;
    }
    if (r->submitted < r->num_pieces) {
      if (r->error == 0 && c.result == static_cast<int64_t>(piece->len)) {
        next.push_back(PieceRequest(*r, BlockIoOp::kRead));
      } else {
        // The record failed: the pieces not yet submitted never will be.
        r->pieces_left -= r->num_pieces - r->submitted;
        r->submitted = r->num_pieces;
      }
    }
    if (!r->listed) {
      r->listed = true;
      reads.push_back(r);
    }
  }
  if (!next.empty()) io_->Submit(next);
  // Pass 2, reads: feed the landed pieces to the verifier; a record whose last piece landed is
  // finished (RecordDone may free its batch: each record is listed once, and a batch is freed
  // only after all of its records were finished).
  for (size_t i = 0; i < reads.size(); ++i) {
    RecordIo* r = reads[i];
    r->listed = false;
    {
      profile::ScopedStage verifying(profile::Stage::kDiskReadVerify);
      CheckLanded(*r);
      if (r->pieces_left != 0) continue;
      FinishRead(*r);
    }
    RecordDone(r->op);
  }
  if (done.empty()) return;
  std::vector<DiskTier::TicketPtr> commit;
  std::vector<uint64_t> checksums;
  std::vector<RecordIo*> committing;
  for (RecordIo* r : done) {
    DiskRecordResult& rr = r->op->result->records[r->index];
    if (r->error != 0) {
      rr.status = ErrnoStatus("disk write", r->info.key, r->error);
      tier_->Count(r->error == -ENOSPC ? DiskTier::Counter::kNoSpace
                                       : DiskTier::Counter::kWriteIoErrors);
      tier_->AbortWrite(r->ticket);
    } else if (r->moved != r->bytes) {
      rr.status =
          Status::IOError("disk write of " + r->info.key.ToString() + ": short write, " +
                          std::to_string(r->moved) + " of " + std::to_string(r->bytes) + " bytes");
      tier_->Count(DiskTier::Counter::kShortWrites);
      tier_->AbortWrite(r->ticket);
    } else {
      commit.push_back(r->ticket);
      checksums.push_back(r->checksum);
      committing.push_back(r);
    }
  }
  if (!commit.empty()) {
    const Status s = tier_->CommitWrites(commit, checksums);
    for (RecordIo* r : committing) {
      DiskRecordResult& rr = r->op->result->records[r->index];
      rr.status = s;
      if (s.ok()) {
        rr.extent_id = r->info.extent.Id();
        tier_->Count(DiskTier::Counter::kWrites);
        tier_->Count(DiskTier::Counter::kWriteBytes, r->bytes);
      }
    }
  }
  for (RecordIo* r : done) {
    r->ticket.reset();
    RecordDone(r->op);
  }
}

void DiskMover::RecordDone(OpState* op) {
  if (op->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) FinishOp(op);
}

void DiskMover::FinishOp(OpState* op) {
  std::optional<profile::ScopedStage> finishing;
  if (op->direction == Direction::kLoad) finishing.emplace(profile::Stage::kDiskReadFinish);
  DiskBatchResult& result = *op->result;
  const Status* first = nullptr;
  for (size_t i = 0; i < result.records.size(); ++i) {
    const DiskRecordResult& rr = result.records[i];
    if (!rr.status.ok()) {
      ++result.failed;
      if (first == nullptr) first = &rr.status;
      continue;
    }
    if (rr.existing) continue;
    const RecordIo& r = op->records[i];
    const TierSlot host{Tier::kHost, r.slot};
    const TierSlot disk{Tier::kDisk, rr.extent_id};
    result.units.push_back(op->direction == Direction::kSave
                               ? CacheTransferUnit{r.info.key.kind, host, disk}
                               : CacheTransferUnit{r.info.key.kind, disk, host});
  }
  Status status;
  if (first != nullptr) {
    status = first->WithContext(std::to_string(result.failed) + " of " +
                                std::to_string(result.records.size()) + " records failed; first");
  }
  op->completer.Complete(std::move(status));
  delete op;
}

Status DiskMover::Close() {
  std::unique_lock<std::shared_mutex> guard(close_mu_);
  if (closed_) return Status::OK();
  closed_ = true;
  if (io_) io_->Shutdown();  // every batch's I/O completes; their fences fire
  return tier_ ? tier_->Close() : Status::OK();
}

}  // namespace cachepawl
