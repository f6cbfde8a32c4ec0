// How a serving engine wires Cachepawl into its scheduler (docs/EMBEDDING.md walks through it).
//
// The "engine" here is a toy: its L1 is the store-owned device pool (an engine with its own
// paged KV tensors calls Store::RegisterDevicePool instead), "prefill" writes deterministic bytes
// into the device pages, and every page loaded from the store is compared with what prefill
// would have computed. It runs in CPU mode without a GPU and on the GPU when there is one.
//
//   engine_integration [STORE_DIR]     (default: a fresh temporary folder)
#include <cachepawl/store/store.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

using namespace cachepawl;

namespace {

// What "prefill" computes for a page or a state: bytes defined by its hash.
std::vector<std::byte> Compute(const ModelLayout& layout, const PageHash& h, Kind kind) {
  std::vector<std::byte> out(layout.RecordBytes(kind));
  uint64_t x;
  std::memcpy(&x, h.bytes.data(), 8);
  x ^= kind == Kind::kMamba ? 0x9e3779b97f4a7c15ull : 0;
  for (auto& b : out) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<std::byte>(x >> 56);
  }
  return out;
}

struct Request {
  std::string tenant;
  std::vector<uint32_t> prompt;
};

int Fail(const char* what, const Status& s) {
  std::fprintf(stderr, "engine_integration: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  if (argc > 1) {
    dir = argv[1];
  } else {
    char templ[] = "/tmp/cachepawl-example-XXXXXX";
    if (mkdtemp(templ) == nullptr) return 1;
    dir = templ;
  }

  // 1. Open the store once, at engine start-up: the model's layout, a host budget, a disk
  //    budget (optional), and the track interval at which the engine saves Mamba states.
  StoreOptions options;
  options.layout_name = "jamba-v0.1";  // or a JSON layout file, or options.layout = ...
  options.page_size_tokens = 16;
  options.host_bytes = 64ull << 20;
  options.disk_dir = dir;
  options.disk_bytes = 256ull << 20;
  options.write_policy = WritePolicy::kWriteThrough;
  options.device_pool_bytes = 96ull << 20;  // L1 delegated to the store (toy engine)
  options.track_interval_pages = 4;
  auto opened = Store::Open(options);
  if (!opened.ok()) return Fail("Store::Open", opened.status());
  std::unique_ptr<Store> store = std::move(opened).value();
  const ModelLayout& layout = store->layout();
  const uint32_t page = layout.page_size_tokens;

  // Two tenants; the second request of each shares the first one's prompt and extends it.
  std::vector<uint32_t> base(page * 12);
  std::iota(base.begin(), base.end(), 1000);
  std::vector<uint32_t> longer = base;
  for (uint32_t i = 0; i < page * 4; ++i) longer.push_back(50000 + i);
  std::vector<Request> requests = {{"tenant-a", base}, {"tenant-a", longer}, {"tenant-b", base}};

  uint64_t reused_tokens = 0, computed_pages = 0, wrong = 0;
  for (const Request& req : requests) {
    // 2. Admission: how much of this prompt can be reused?
    auto match = store->Lookup(req.tenant, req.prompt);
    if (!match.ok()) return Fail("Lookup", match.status());
    // 3. Lock what will be reused for as long as the request uses it.
    auto lock = store->Lock(*match, match->reusable_pages);
    if (!lock.ok()) return Fail("Lock", lock.status());

    // 4. Allocate L1 pages for the whole prompt and a state slot.
    const size_t pages = match->hashes.size();
    std::vector<uint64_t> device_pages;
    for (size_t i = 0; i < pages; ++i) {
      auto p = store->AllocateDeviceSlot(Kind::kKV);
      if (!p.ok()) return Fail("AllocateDeviceSlot", p.status());
      device_pages.push_back(*p);
    }
    auto state_slot = store->AllocateDeviceSlot(Kind::kMamba);
    if (!state_slot.ok()) return Fail("AllocateDeviceSlot", state_slot.status());

    // 5. Load the reusable prefix (disk -> host -> device) before prefill. A real engine makes
    //    its forward stream wait with fence.StreamWait(stream); this toy waits on the CPU.
    const size_t hit = match->reusable_pages;
    if (hit > 0) {
      auto fence = store->Load(*match, std::span(device_pages).first(hit), *state_slot);
      if (!fence.ok()) return Fail("Load", fence.status());
      Status s = fence->Wait();
      if (!s.ok()) return Fail("Load fence", s);
      for (size_t i = 0; i < hit; ++i) {
        std::vector<std::byte> got(layout.RecordBytes(Kind::kKV));
        if (!store->ReadDeviceRecord(Kind::kKV, device_pages[i], got).ok() ||
            got != Compute(layout, match->hashes[i], Kind::kKV)) {
          ++wrong;
        }
      }
      std::vector<std::byte> state(layout.RecordBytes(Kind::kMamba));
      if (!store->ReadDeviceRecord(Kind::kMamba, *state_slot, state).ok() ||
          state != Compute(layout, match->hashes[hit - 1], Kind::kMamba)) {
        ++wrong;
      }
      reused_tokens += match->reusable_tokens();
    }

    // 6. Prefill the rest. Save a Mamba state at every track interval (the checkpoint hint says
    //    where the next request sharing this prefix would want one) and at the end.
    for (size_t i = hit; i < pages; ++i) {
      if (!store
               ->WriteDeviceRecord(Kind::kKV, device_pages[i],
                                   Compute(layout, match->hashes[i], Kind::kKV))
               .ok()) {
        return 1;
      }
      ++computed_pages;
      const bool checkpoint = (i + 1) % options.track_interval_pages == 0 || i + 1 == pages;
      if (!checkpoint) continue;
      if (!store
               ->WriteDeviceRecord(Kind::kMamba, *state_slot,
                                   Compute(layout, match->hashes[i], Kind::kMamba))
               .ok()) {
        return 1;
      }
      // 7. Save the new pages and the state; the device slots are reusable once it fires.
      SaveRequest save;
      save.ns = req.tenant;
      save.tokens = req.prompt;
      save.first_page = hit;
      save.device_pages = std::span(device_pages).subspan(hit, i + 1 - hit);
      save.device_state_slot = *state_slot;
      save.state_depth_tokens = (i + 1) * page;
      auto fence = store->Save(save);
      if (!fence.ok()) return Fail("Save", fence.status());
      Status s = fence->Wait();
      if (!s.ok()) return Fail("Save fence", s);
    }

    // 8. Finish: unlock, give the L1 slots back.
    if (Status s = store->Unlock(*lock); !s.ok()) return Fail("Unlock", s);
    for (uint64_t p : device_pages) (void)store->FreeDeviceSlot(Kind::kKV, p);
    (void)store->FreeDeviceSlot(Kind::kMamba, *state_slot);
  }

  StoreStats stats = store->Stats();
  std::printf("requests: %zu  reused tokens: %llu  computed pages: %llu  wrong pages: %llu\n",
              requests.size(), static_cast<unsigned long long>(reused_tokens),
              static_cast<unsigned long long>(computed_pages),
              static_cast<unsigned long long>(wrong));
  std::printf("stats: %s\n", stats.ToJson().c_str());
  if (Status s = store->Close(); !s.ok()) return Fail("Close", s);
  if (argc <= 1) std::filesystem::remove_all(dir);
  // The second request must have reused the first one's 12 pages; the third (another tenant)
  // nothing.
  if (wrong != 0 || reused_tokens != 12ull * page) {
    std::fprintf(stderr, "engine_integration: expected 0 wrong pages and %u reused tokens\n",
                 12 * page);
    return 1;
  }
  return 0;
}
