// A child process for the Store's reopen and remote tests: opens the store in DISK_DIR (the
// test's options), saves the full pages of tokens [FIRST, FIRST + PAGES * 4) and the state after
// them, closes. With REMOTE_SEEDS, the store writes through to that Redis Cluster (chunks of
// 64 KiB) and closes once every entry is there (Close sends what is still queued).
//   store_writer DISK_DIR FIRST PAGES [REMOTE_SEEDS]   exit 0 on success, 1 with a message
#include <cstdio>
#include <cstdlib>
#include <string>

#include "store/store.h"
#include "tests/store/store_test_util.h"

using namespace cachepawl;

namespace {
int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "store_writer: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: store_writer DISK_DIR FIRST PAGES [REMOTE_SEEDS]\n");
    return 2;
  }
  StoreOptions o;
  o.layout = TinyHybrid();
  o.host_bytes = 1 << 20;
  o.cuda_device = -1;
  o.device_pool_bytes = 4 << 20;
  o.disk_dir = argv[1];
  o.disk_bytes = 8 << 20;
  o.disk_queue_depth = 8;
  if (argc == 5) {
    o.remote.seeds = argv[4];
    o.remote.chunk_bytes = 64 << 10;
    o.remote.deadline_ms = 10000;
  }
  auto opened = Store::Open(o);
  if (!opened.ok()) return Fail("Open", opened.status());
  auto store = std::move(opened).value();
  const auto tokens = Tokens(static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10)),
                             4 * std::strtoul(argv[3], nullptr, 10));
  const auto hashes = store->HashTokens("", tokens);
  std::vector<uint64_t> pages;
  for (const PageHash& h : hashes) {
    auto p = store->AllocateDeviceSlot(Kind::kKV);
    if (!p.ok()) return Fail("AllocateDeviceSlot", p.status());
    Status w = store->WriteDeviceRecord(Kind::kKV, *p, Content(store->layout(), h, Kind::kKV));
    if (!w.ok()) return Fail("WriteDeviceRecord", w);
    pages.push_back(*p);
  }
  auto state = store->AllocateDeviceSlot(Kind::kMamba);
  if (!state.ok()) return Fail("AllocateDeviceSlot", state.status());
  Status w = store->WriteDeviceRecord(Kind::kMamba, *state,
                                      Content(store->layout(), hashes.back(), Kind::kMamba));
  if (!w.ok()) return Fail("WriteDeviceRecord", w);
  const SaveRequest req = WholePromptSave(tokens, pages, *state);
  auto f = store->Save(req);
  if (!f.ok()) return Fail("Save", f.status());
  if (Status s = f->Wait(); !s.ok()) return Fail("Save fence", s);
  // Close drains the write-through disk writes, persists the catalog, and sends the remote
  // writes still queued.
  if (Status s = store->Close(); !s.ok()) return Fail("Close", s);
  if (argc == 5) {
    const RemoteStats r = store->Stats().remote;
    if (r.writes != hashes.size() + 1) {
      return Fail("remote writes",
                  Status::Internal(std::to_string(r.writes) + " of " +
                                   std::to_string(hashes.size() + 1) + " entries stored"));
    }
  }
  return 0;
}
