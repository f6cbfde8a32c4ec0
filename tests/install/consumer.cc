// A program built against an *installed* Cachepawl (tests/install/check_install.sh builds it
// with find_package(Cachepawl) and with pkg-config): it includes only <cachepawl/...> headers
// and links only libcachepawl.so.
//
// It reads a Hugging Face config.json's layout, then opens a store in CPU mode with a store-owned
// device pool, a small host tier and a disk tier in DIR, writes KV pages and a Mamba state into
// device slots, Saves them, Looks the prompt up, Loads it into other slots and compares every byte;
// then closes the store, reopens it from DIR (host tier empty: the disk path) and loads and
// compares again. Any error or mismatch is printed and the exit status is 1.
//
//   consumer DIR        (DIR: an empty folder the store may use)
#include <cachepawl/layouts/layout_from_hf.h>
#include <cachepawl/store/store.h>
#include <cachepawl/vocab/device_pool.h>  // unused here; an engine with its own pool needs it

#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

using namespace cachepawl;

namespace {

constexpr uint32_t kPageTokens = 16;
constexpr size_t kPages = 4;

// A small hybrid model: two attention layers and two Mamba-2 layers.
ModelLayout SmallHybrid() {
  ModelLayout l;
  l.model = "cachepawl-install-check";
  l.num_layers = 4;
  l.page_size_tokens = kPageTokens;
  l.attention_layers = {{0, 2, 64, DType::kBf16, 0}, {2, 2, 64, DType::kBf16, 0}};
  l.ssm_layers = {{1, "mamba2", {256, 3}, DType::kBf16, {4, 32, 16}, DType::kFp32},
                  {3, "mamba2", {256, 3}, DType::kBf16, {4, 32, 16}, DType::kFp32}};
  return l;
}

// Distinct bytes for every page and the state.
std::vector<std::byte> Pattern(uint64_t bytes, uint64_t seed) {
  std::vector<std::byte> out(bytes);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& b : out) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<std::byte>(x >> 56);
  }
  return out;
}

bool Check(const Status& s, const char* what) {
  if (!s.ok()) std::fprintf(stderr, "consumer: %s: %s\n", what, s.ToString().c_str());
  return s.ok();
}

// The Hugging Face config reader is installed API too: a two-layer Mamba-2 config gives conv
// states of [2 * 64 + 2 * 1 * 16, 4].
bool ReadsAHfConfig() {
  HfLayoutOptions o;
  o.page_size_tokens = kPageTokens;
  auto l = LayoutFromHfConfig(R"({"model_type": "mamba2", "hidden_size": 64, "num_heads": 2,
                                  "head_dim": 64, "n_groups": 1, "state_size": 16,
                                  "num_hidden_layers": 2})",
                              o);
  if (!Check(l.status(), "LayoutFromHfConfig")) return false;
  const bool right =
      l->ssm_layers.size() == 2 && l->ssm_layers[1].conv_shape == std::vector<uint64_t>{160, 4};
  if (!right) std::fprintf(stderr, "consumer: LayoutFromHfConfig: %s", l->Describe().c_str());
  return right;
}

StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& dir) {
  StoreOptions options;
  options.layout = SmallHybrid();
  options.host_bytes = 16ull << 20;
  options.disk_dir = dir;
  options.disk_bytes = 64ull << 20;
  options.write_policy = WritePolicy::kWriteThrough;
  options.cuda_device = -1;  // CPU mode, GPU or not
  options.device_pool_bytes = 16ull << 20;
  options.staging_bytes = 4ull << 20;
  return Store::Open(options);
}

std::vector<uint64_t> Allocate(Store& store, Kind kind, size_t n) {
  std::vector<uint64_t> slots;
  for (size_t i = 0; i < n; ++i) {
    auto s = store.AllocateDeviceSlot(kind);
    if (!Check(s.status(), "AllocateDeviceSlot")) return {};
    slots.push_back(*s);
  }
  return slots;
}

// Looks `tokens` up, loads the whole prefix into fresh slots and compares every byte with the
// patterns. `when` names the phase in messages.
bool LoadAndCompare(Store& store, const std::vector<uint32_t>& tokens, const char* when) {
  auto match = store.Lookup("tenant", tokens);
  if (!Check(match.status(), "Lookup")) return false;
  if (match->reusable_pages != kPages) {
    std::fprintf(stderr, "consumer (%s): Lookup found %zu reusable pages, expected %zu\n", when,
                 match->reusable_pages, kPages);
    return false;
  }
  const std::vector<uint64_t> pages = Allocate(store, Kind::kKV, kPages);
  const std::vector<uint64_t> state = Allocate(store, Kind::kMamba, 1);
  if (pages.size() != kPages || state.size() != 1) return false;
  auto fence = store.Load(*match, pages, state[0]);
  if (!Check(fence.status(), "Load") || !Check(fence->Wait(), "Load fence")) return false;

  const ModelLayout& layout = store.layout();
  bool same = true;
  for (size_t i = 0; i <= kPages; ++i) {  // kPages KV pages, then the state
    const Kind kind = i < kPages ? Kind::kKV : Kind::kMamba;
    std::vector<std::byte> got(layout.RecordBytes(kind));
    if (!Check(store.ReadDeviceRecord(kind, i < kPages ? pages[i] : state[0], got),
               "ReadDeviceRecord")) {
      return false;
    }
    const std::vector<std::byte> want = Pattern(got.size(), i);
    for (size_t b = 0; b < got.size(); ++b) {
      if (got[b] != want[b]) {
        std::fprintf(stderr, "consumer (%s): %s %zu differs first at byte %zu of %zu\n", when,
                     i < kPages ? "KV page" : "Mamba state", i, b, got.size());
        same = false;
        break;
      }
    }
  }
  for (uint64_t p : pages) (void)store.FreeDeviceSlot(Kind::kKV, p);
  (void)store.FreeDeviceSlot(Kind::kMamba, state[0]);
  return same;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer DIR   (an empty folder the store may use)\n");
    return 2;
  }
  const std::string dir = argv[1];
  if (!ReadsAHfConfig()) return 1;
  std::vector<uint32_t> tokens(kPages * kPageTokens);
  std::iota(tokens.begin(), tokens.end(), 7);

  {
    auto opened = OpenStore(dir);
    if (!Check(opened.status(), "Store::Open")) return 1;
    Store& store = **opened;
    const ModelLayout& layout = store.layout();

    // "Prefill": the pages and the state at depth kPages * kPageTokens into device slots.
    const std::vector<uint64_t> pages = Allocate(store, Kind::kKV, kPages);
    const std::vector<uint64_t> state = Allocate(store, Kind::kMamba, 1);
    if (pages.size() != kPages || state.size() != 1) return 1;
    for (size_t i = 0; i < kPages; ++i) {
      if (!Check(store.WriteDeviceRecord(Kind::kKV, pages[i],
                                         Pattern(layout.RecordBytes(Kind::kKV), i)),
                 "WriteDeviceRecord(KV)")) {
        return 1;
      }
    }
    if (!Check(store.WriteDeviceRecord(Kind::kMamba, state[0],
                                       Pattern(layout.RecordBytes(Kind::kMamba), kPages)),
               "WriteDeviceRecord(Mamba)")) {
      return 1;
    }

    SaveRequest save;
    save.ns = "tenant";
    save.tokens = tokens;
    save.device_pages = pages;
    save.device_state_slot = state[0];
    save.state_depth_tokens = kPages * kPageTokens;
    auto fence = store.Save(save);
    if (!Check(fence.status(), "Save") || !Check(fence->Wait(), "Save fence")) return 1;

    if (!LoadAndCompare(store, tokens, "host tier")) return 1;
    if (!Check(store.Close(), "Close")) return 1;
  }
  {
    // Reopened: the host tier starts empty, so everything comes back from disk.
    auto reopened = OpenStore(dir);
    if (!Check(reopened.status(), "Store::Open (reopen)")) return 1;
    if (!LoadAndCompare(**reopened, tokens, "disk tier, reopened")) return 1;
    if (!Check((*reopened)->Close(), "Close (reopen)")) return 1;
  }
  std::printf(
      "consumer: %zu KV pages and a Mamba state saved, loaded and identical (host tier, "
      "then disk tier after reopening)\n",
      kPages);
  return 0;
}
