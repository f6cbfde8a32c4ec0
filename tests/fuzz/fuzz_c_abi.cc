// Fuzz target: the C ABI's argument checks (capi/cachepawl.h).
//
// Input: a program. Each step takes an operation byte and that operation's arguments from the
// input and makes one C ABI call with them: NULL or live handles (two stores at most, in CPU
// mode, with small tiers under a temporary folder), NULL or real out pointers, arbitrary lengths
// with NULL pointers, arbitrary enums, slots, pages, layer indices, flags and timeouts, option
// setters with arbitrary values, layout JSON and Hugging Face config text from the input, and
// matches and locks of one store handed to the other. Only what the header says is checked is
// passed: never a freed handle, never a pointer with a length longer than its memory (device
// pool memory is the harness's own buffers; a pool whose tensors would reach past them is not
// registered), never a non-NULL CUDA stream outside CPU-only builds.
//
// Properties, after every call: the status is a cachepawl_status; a failure leaves a message
// and sets a handle or string result to NULL; a success leaves the last error alone; a NULL
// handle or out pointer is CACHEPAWL_INVALID_ARGUMENT. At the end every handle is freed in a
// fuzz-chosen order (stores before or after their locks, matches and fences).
//
// Resources are kept small before each open (host and disk budgets, store-owned pools, CPU
// mode), through the options handle's internals: a fuzzer must not fill the disk.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "capi/cachepawl.h"
#include "capi/cachepawl_c_internal.h"
#include "tests/fuzz/fuzz_util.h"
#include "vocab/model_layout.h"

namespace cachepawl::fuzz {
namespace {

namespace fs = std::filesystem;

constexpr int kSlots = 3;  // handles of each type; slot kSlots-1 ... all may be NULL
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kMaxHostBytes = 16 * kMiB;
constexpr uint64_t kMaxDiskBytes = 8 * kMiB;
constexpr uint64_t kMaxPoolBytes = 4 * kMiB;
constexpr size_t kMaxTokens = 512;
constexpr uint32_t kMaxPoolEntries = 8;  // pages and slots of a pool on the harness's memory

std::atomic<int> g_callbacks{0};
void OnFence(void* user_data, cachepawl_status status) {
  Check(user_data == &g_callbacks, "fence callback with another user_data");
  Check(status >= CACHEPAWL_OK && status <= CACHEPAWL_OUT_OF_MEMORY, "callback status range");
  g_callbacks.fetch_add(1, std::memory_order_relaxed);
}

// The process's temporary folder; each input works in a fresh "run" folder inside it.
const fs::path& Root() {
  static const fs::path root = [] {
    std::string t = (fs::temp_directory_path() / "cachepawl-fuzz-c-abi-XXXXXX").string();
    Check(mkdtemp(t.data()) != nullptr, "mkdtemp");
    return fs::path(t);
  }();
  // Removed at a normal exit (the corpus replay). Registered once `root` exists, so it runs
  // before root's destructor. libFuzzer ends with _Exit: tools/fuzz.sh points TMPDIR into its
  // own temporary folder, which it removes.
  static const bool cleanup = [] {
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(Root(), ec);
    });
    return true;
  }();
  (void)cleanup;
  return root;
}

uint64_t SatMul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
uint64_t SatAdd(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}
// Bytes a tensor of `n` entries of `bytes` each, `stride` apart, spans.
uint64_t Span(uint64_t n, uint64_t stride, uint64_t bytes) {
  return n == 0 ? 0 : SatAdd(SatMul(n - 1, stride), bytes);
}

// A C ABI function and its name (for CACHEPAWL_FUZZ_TRACE).
template <typename Fn>
struct Named {
  const char* name;
  Fn fn;
};
#define NAMED(fn) \
  { #fn, &fn }

class Program {
 public:
  explicit Program(FuzzInput& in) : in_(in), dir_(Root() / "run") {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    fs::create_directories(dir_);
  }
  ~Program() { FreeAll(); }

  void Run() {
    for (int steps = 0; steps < 64 && in_.left() > 0; ++steps) Step(in_.Byte());
  }

 private:
  // ---- Checks on every call ----

  // Makes the call `call()`. `nulls`: it gets a NULL handle or out pointer the header says it
  // checks.
  template <typename F>
  cachepawl_status Done(bool nulls, F&& call, const char* what) {
    const std::string error_before = cachepawl_last_error();
    const cachepawl_status s = call();
    // CACHEPAWL_FUZZ_TRACE=1: every call and its answer on stderr (to read a regression).
    static const bool trace = std::getenv("CACHEPAWL_FUZZ_TRACE") != nullptr;
    if (trace) {
      std::fprintf(stderr, "%s -> %s %s\n", what, cachepawl_status_name(s),
                   s == CACHEPAWL_OK ? "" : cachepawl_last_error());
    }
    Check(s >= CACHEPAWL_OK && s <= CACHEPAWL_OUT_OF_MEMORY, "status out of range");
    if (s == CACHEPAWL_OK) {
      Check(!nulls, "a NULL handle or out pointer accepted");
      Check(error_before == cachepawl_last_error(), "a successful call changed the last error");
    } else {
      Check(cachepawl_last_error()[0] != '\0', "a failed call without a message");
      if (nulls) Check(s == CACHEPAWL_INVALID_ARGUMENT, "a NULL not refused as INVALID_ARGUMENT");
      Check(s != CACHEPAWL_INTERNAL, cachepawl_last_error());
    }
    return s;
  }
// Every argument is computed before the CALL (the input is read in statement order, the same
// under every compiler, so a crash found by the clang build replays in the GCC one).
#define CALL(nulls, expr) Done((nulls), [&] { return (expr); }, #expr)

  // A handle result into a slot the input picks (or a NULL out pointer, as the input says).
  template <typename T, typename F>
  void Make(T* (&slots)[kSlots], bool nulls, F&& call, const char* from = __builtin_FUNCTION()) {
    T*& slot = slots[in_.Below(kSlots)];
    const bool null_out = NullOut();
    MakeAt(slot, null_out, nulls, call, from);
  }
  // A handle result: `slot` gets it on success; on failure the call must have set it to NULL.
  template <typename T, typename F>
  void MakeAt(T*& slot, bool null_out, bool nulls, F&& call,
              const char* from = __builtin_FUNCTION()) {
    static char sentinel;
    T* out = reinterpret_cast<T*>(&sentinel);
    const cachepawl_status s = Done(
        nulls || null_out, [&] { return call(null_out ? nullptr : &out); }, from);
    if (null_out) return;
    if (s != CACHEPAWL_OK) {
      Check(out == nullptr, "a failed call left its handle result set");
      return;
    }
    Check(out != nullptr && out != reinterpret_cast<T*>(&sentinel), "OK without a handle");
    Free(slot);
    slot = out;
  }
  template <typename F>
  void MakeString(bool null_out, bool nulls, F&& call, const char* from = __builtin_FUNCTION()) {
    cachepawl_layout* unused = nullptr;
    char* str = reinterpret_cast<char*>(&unused);
    const cachepawl_status s = Done(
        nulls || null_out, [&] { return call(null_out ? nullptr : &str); }, from);
    if (null_out) return;
    Check(s == CACHEPAWL_OK ? str != nullptr : str == nullptr, "string result vs status");
    if (s == CACHEPAWL_OK) cachepawl_string_free(str);
  }

  // ---- Arguments ----

  template <typename T>
  T* Pick(T* (&slots)[kSlots]) {
    return slots[in_.Below(kSlots)];
  }
  bool NullOut() { return (in_.Byte() & 7) == 0; }
  // One of `table`.
  template <typename T, size_t N>
  const T& Choose(const T (&table)[N]) {
    return table[in_.Below(N)];
  }
  // A call with one out pointer (`Out`, NULL as the input says) besides its other arguments.
  template <typename Out, typename F>
  cachepawl_status Get(bool nulls, F&& call, const char* what) {
    Out out{};
    const bool null_out = NullOut();
    return Done(
        nulls || null_out, [&] { return call(null_out ? nullptr : &out); }, what);
  }
  uint64_t Number() {
    switch (in_.Byte() & 3) {
      case 0:
        return in_.Byte() % 8;
      case 1:
        return in_.Take<uint16_t>();
      case 2:
        return UINT64_MAX - in_.Byte() % 4;
      default:
        return in_.Take<uint64_t>();
    }
  }
  int32_t Enum() { return (in_.Byte() & 3) == 0 ? in_.Take<int32_t>() : in_.Byte() % 4 - 1; }
  // A NUL-terminated string: NULL, one of `known`, or bytes of the input.
  const char* Text(std::initializer_list<const char*> known) {
    const uint8_t c = in_.Byte() % (known.size() + 2);
    if (c == 0) return nullptr;
    if (c <= known.size()) return known.begin()[c - 1];
    strings_.push_back(in_.String(64));
    return strings_.back().c_str();
  }
  // A path: NULL, inside the run folder (a file the input wrote, a folder, a missing one).
  const char* Path() {
    static const char* kNames[] = {"file.json", "d0", "d1", "missing/x.json", "", "data0"};
    const uint8_t c = in_.Byte() % 7;
    if (c == 0) return nullptr;
    strings_.push_back((dir_ / kNames[c - 1]).string());
    return strings_.back().c_str();
  }
  // Bytes for a (pointer, length) pair: NULL with any length, or input bytes with theirs.
  std::pair<const char*, size_t> Bytes(size_t max) {
    if ((in_.Byte() & 7) == 0) return {nullptr, Number()};
    strings_.push_back(in_.String(max));
    return {strings_.back().data(), strings_.back().size()};
  }
  // A namespace and a prompt as the C ABI takes them, bad at times: a NULL namespace with a
  // length, NULL tokens with a count.
  struct PromptArgs {
    const char* ns;
    size_t ns_len;
    std::vector<uint32_t> tokens;
    bool null_tokens;
    bool bad() const { return (ns == nullptr && ns_len > 0) || null_tokens; }
    const uint32_t* token_data() const { return null_tokens ? nullptr : tokens.data(); }
  };
  PromptArgs Prompt() {
    const auto [ns, ns_len] = Bytes(32);
    std::vector<uint32_t> t = Tokens();
    const bool null_tokens = (in_.Byte() & 7) == 0 && !t.empty();
    return {ns, ns_len, std::move(t), null_tokens};
  }
  // Up to 64 page hashes (32 bytes each) as the C ABI takes them, NULL with a count at times.
  struct HashArgs {
    std::vector<uint8_t> bytes;
    bool null_hashes;
    const uint8_t* data() const { return null_hashes ? nullptr : bytes.data(); }
    size_t count() const { return bytes.size() / 32; }
  };
  HashArgs Hashes() {
    std::vector<uint8_t> hashes(32 * in_.Below(65));
    for (size_t i = 0; i < hashes.size(); ++i) hashes[i] = in_.Byte();
    const bool null_hashes = (in_.Byte() & 7) == 0 && !hashes.empty();
    return {std::move(hashes), null_hashes};
  }
  std::vector<uint32_t> Tokens() {
    const uint8_t mode = in_.Byte();
    std::vector<uint32_t> t(in_.Below(kMaxTokens + 1));
    for (size_t i = 0; i < t.size(); ++i) t[i] = (mode & 1) != 0 ? in_.Byte() : uint32_t(i * mode);
    return t;
  }
  // device_pages: NULL with a length, or values from the input.
  std::pair<const uint64_t*, size_t> Pages(std::vector<uint64_t>& keep) {
    if ((in_.Byte() & 7) == 0) return {nullptr, Number()};
    keep.resize(in_.Below(33));
    for (uint64_t& p : keep) p = (in_.Byte() & 1) != 0 ? in_.Byte() % 16 : Number();
    return {keep.data(), keep.size()};
  }
  uint64_t StateSlot() { return (in_.Byte() & 3) == 0 ? CACHEPAWL_NO_SLOT : Number(); }
  // The device slots a Load or Save names: up to 32 page slots (or NULL with a count), a state
  // slot and the first page.
  struct SlotArgs {
    std::vector<uint64_t> keep;  // the page slots
    const uint64_t* pages = nullptr;
    size_t n = 0;
    uint64_t state_slot = 0;
    size_t first = 0;
    bool null_pages() const { return pages == nullptr && n > 0; }
  };
  SlotArgs DeviceSlots() {
    SlotArgs a;
    std::tie(a.pages, a.n) = Pages(a.keep);
    a.state_slot = StateSlot();
    a.first = (in_.Byte() & 1) != 0 ? in_.Byte() % 64 : Number();
    return a;
  }

  // ---- Operations ----

  void NewOptions() {
    Make(options_, false, [](cachepawl_options** o) { return cachepawl_options_new(o); });
  }

  void LayoutFromPreset() {
    const char* name = Text({"recurrentgemma-2b", "jamba-v0.1", "llama-3.1-8b", "mamba2-2.7b"});
    const auto page = static_cast<uint32_t>(Number());
    Make(layouts_, name == nullptr,
         [&](cachepawl_layout** o) { return cachepawl_layout_from_preset(name, page, o); });
  }
  void LayoutFromJson() {
    const auto json_len = Bytes(4096);
    const auto json = json_len.first;
    const auto len = json_len.second;
    if (in_.Bool()) {
      const char* path = Path();
      Make(layouts_, path == nullptr,
           [&](cachepawl_layout** o) { return cachepawl_layout_from_json_file(path, o); });
      return;
    }
    Make(layouts_, false,
         [&](cachepawl_layout** o) { return cachepawl_layout_from_json_string(json, len, o); });
  }
  void LayoutFromHf() {
    const auto json_len = Bytes(4096);
    const auto json = json_len.first;
    const auto len = json_len.second;
    const bool file = in_.Bool();
    const char* path = file ? Path() : nullptr;
    const char* cache = Text({"bf16", "float16", "fp8_e4m3"});
    const char* state = Text({"fp32", "bf16"});
    const char* convention = Text({"transformers", "sglang"});
    const auto page = static_cast<uint32_t>(Number());
    const char* model = Text({"fuzz/model"});
    Make(layouts_, file && path == nullptr, [&](cachepawl_layout** o) {
      return file ? cachepawl_layout_from_hf_config_file(path, cache, state, convention, page,
                                                         model, o)
                  : cachepawl_layout_from_hf_config_string(json, len, cache, state, convention,
                                                           page, model, o);
    });
  }
  void LayoutQuery() {
    using U32 = cachepawl_status (*)(const cachepawl_layout*, uint32_t*);
    using PerLayer = cachepawl_status (*)(const cachepawl_layout*, size_t, uint64_t*);
    static constexpr Named<U32> kU32[] = {
        NAMED(cachepawl_layout_page_size_tokens), NAMED(cachepawl_layout_window_tokens),
        NAMED(cachepawl_layout_window_pages), NAMED(cachepawl_layout_num_layers)};
    static constexpr Named<PerLayer> kPerLayer[] = {
        NAMED(cachepawl_layout_k_bytes_per_page), NAMED(cachepawl_layout_v_bytes_per_page),
        NAMED(cachepawl_layout_conv_state_bytes), NAMED(cachepawl_layout_ssm_state_bytes)};
    const cachepawl_layout* l = Pick(layouts_);
    const bool null_l = l == nullptr;
    const cachepawl_kind kind = Enum();
    const size_t i = Number();
    switch (in_.Byte() % 8) {
      case 0: {
        const bool null_out = NullOut();
        MakeString(null_out, null_l, [&](char** o) { return cachepawl_layout_to_json(l, o); });
        break;
      }
      case 1: {
        const auto& f = Choose(kU32);
        Get<uint32_t>(
            null_l, [&](uint32_t* o) { return f.fn(l, o); }, f.name);
        break;
      }
      case 2: {
        const auto& f = Choose(kPerLayer);
        Get<uint64_t>(
            null_l, [&](uint64_t* o) { return f.fn(l, i, o); }, f.name);
        break;
      }
      case 3:
        Get<uint64_t>(
            null_l, [&](uint64_t* o) { return cachepawl_layout_record_bytes(l, kind, o); },
            "cachepawl_layout_record_bytes");
        break;
      case 4:
        Get<size_t>(
            null_l, [&](size_t* o) { return cachepawl_layout_num_layers_of_kind(l, kind, o); },
            "cachepawl_layout_num_layers_of_kind");
        break;
      case 5:
        Get<uint32_t>(
            null_l, [&](uint32_t* o) { return cachepawl_layout_layer_index(l, kind, i, o); },
            "cachepawl_layout_layer_index");
        break;
      case 6: {
        // A rank's share (of a whole layout or, refused, of a share), then its degree and rank.
        const auto tp_size = static_cast<uint32_t>(in_.Byte() % 10);
        const auto tp_rank = static_cast<uint32_t>(in_.Byte() % 10);
        Make(layouts_, null_l,
             [&](cachepawl_layout** o) { return cachepawl_layout_shard(l, tp_size, tp_rank, o); });
        const cachepawl_layout* any = Pick(layouts_);
        uint32_t rank = 0;
        Get<uint32_t>(
            any == nullptr, [&](uint32_t* o) { return cachepawl_layout_tp(any, o, &rank); },
            "cachepawl_layout_tp");
        break;
      }
      default: {
        uint8_t fp[32];
        const size_t capacity = in_.Bool() ? sizeof(fp) : in_.Byte() % 32;
        Get<int>(
            null_l,
            [&](int* o) { return cachepawl_layout_fingerprint(l, o ? fp : nullptr, capacity); },
            "cachepawl_layout_fingerprint");
      }
    }
  }
  // The input's next bytes as the run folder's file.json (for the *_file calls).
  void WriteInputFile() {
    const std::string text = in_.String(4096);
    std::ofstream(dir_ / "file.json", std::ios::binary) << text;
  }

  void SetOption() {
    using U64 = cachepawl_status (*)(cachepawl_options*, uint64_t);
    using U32 = cachepawl_status (*)(cachepawl_options*, uint32_t);
    using I32 = cachepawl_status (*)(cachepawl_options*, int32_t);
    using Str = cachepawl_status (*)(cachepawl_options*, const char*);
    static constexpr Named<U64> kU64[] = {NAMED(cachepawl_options_set_host_bytes),
                                          NAMED(cachepawl_options_set_host_free_target_bytes),
                                          NAMED(cachepawl_options_set_disk_bytes),
                                          NAMED(cachepawl_options_set_device_pool_bytes),
                                          NAMED(cachepawl_options_set_staging_bytes),
                                          NAMED(cachepawl_options_set_remote_chunk_bytes),
                                          NAMED(cachepawl_options_set_max_prompt_tokens)};
    static constexpr Named<U32> kU32[] = {NAMED(cachepawl_options_set_save_chunk_entries),
                                          NAMED(cachepawl_options_set_disk_queue_depth),
                                          NAMED(cachepawl_options_set_selective_min_hits),
                                          NAMED(cachepawl_options_set_track_interval_pages),
                                          NAMED(cachepawl_options_set_remote_deadline_ms),
                                          NAMED(cachepawl_options_set_remote_lookup_deadline_ms),
                                          NAMED(cachepawl_options_set_remote_ttl_seconds),
                                          NAMED(cachepawl_options_set_remote_selective_min_hits),
                                          NAMED(cachepawl_options_set_remote_max_queued_writes)};
    static constexpr Named<I32> kI32[] = {NAMED(cachepawl_options_set_write_policy),
                                          NAMED(cachepawl_options_set_eviction_policy),
                                          NAMED(cachepawl_options_set_wipe_on_layout_mismatch),
                                          NAMED(cachepawl_options_set_cuda_device),
                                          NAMED(cachepawl_options_set_remote_write_policy),
                                          NAMED(cachepawl_options_set_wipe_unreadable_catalog)};
    static constexpr Named<Str> kPaths[] = {NAMED(cachepawl_options_set_layout_json_file),
                                            NAMED(cachepawl_options_set_disk_dir),
                                            NAMED(cachepawl_options_add_disk_data_path),
                                            NAMED(cachepawl_options_set_remote_key_prefix)};
    cachepawl_options* o = Pick(options_);
    const bool null_o = o == nullptr;
    const uint64_t v = Number();
    switch (in_.Byte() % 10) {
      case 0: {
        const auto& f = Choose(kU64);
        Done(
            null_o, [&] { return f.fn(o, v); }, f.name);
        break;
      }
      case 1: {
        const auto& f = Choose(kU32);
        Done(
            null_o, [&] { return f.fn(o, static_cast<uint32_t>(v)); }, f.name);
        break;
      }
      case 2: {
        const auto& f = Choose(kI32);
        const int32_t e = Enum();
        Done(
            null_o, [&] { return f.fn(o, e); }, f.name);
        break;
      }
      case 3: {
        const auto& f = Choose(kPaths);
        const char* path = Path();
        Done(
            null_o || path == nullptr, [&] { return f.fn(o, path); }, f.name);
        break;
      }
      case 4: {
        const char* name = Text({"recurrentgemma-2b", "llama-3.1-8b", "mamba2-2.7b"});
        const auto page = static_cast<uint32_t>(Number());
        CALL(null_o || name == nullptr, cachepawl_options_set_layout_preset(o, name, page));
        break;
      }
      case 5: {
        const auto text = Bytes(4096);
        CALL(null_o, cachepawl_options_set_layout_json_string(o, text.first, text.second));
        break;
      }
      case 6: {
        const cachepawl_layout* l = Pick(layouts_);
        CALL(null_o || l == nullptr, cachepawl_options_set_layout(o, l));
        break;
      }
      case 7: {
        const int32_t load = Enum(), write = Enum();
        CALL(null_o, cachepawl_options_set_stream_priorities(o, load, write));
        const uint32_t completion = static_cast<uint32_t>(Enum()),
                       wait = static_cast<uint32_t>(Enum());
        CALL(null_o, cachepawl_options_set_polling(o, completion, wait, Enum()));
        break;
      }
      case 8:
        CALL(null_o, cachepawl_options_validate(o));
        break;
      default: {  // the usual small store: a tiny layout, 4 MiB host, maybe 4 MiB disk and pool
        if (o == nullptr) break;
        CALL(false, cachepawl_options_set_layout_preset(o, "recurrentgemma-2b", 4));
        CALL(false, cachepawl_options_set_host_bytes(o, 4 * kMiB));
        CALL(false, cachepawl_options_set_cuda_device(o, -1));
        if (in_.Bool()) CALL(false, cachepawl_options_set_device_pool_bytes(o, 2 * kMiB));
        if (in_.Bool()) {
          CALL(false, cachepawl_options_set_disk_dir(o, (dir_ / "d0").c_str()));
          CALL(false, cachepawl_options_set_disk_bytes(o, 4 * kMiB));
        }
      }
    }
  }

  // Keeps what an open would allocate small, and the store in CPU mode.
  static void Bound(StoreOptions& o) {
    if (o.host_bytes > kMaxHostBytes) o.host_bytes = kMaxHostBytes;
    if (o.disk_bytes > kMaxDiskBytes) o.disk_bytes = kMaxDiskBytes;
    if (o.device_pool_bytes > kMaxPoolBytes) o.device_pool_bytes = kMaxPoolBytes;
    if (o.disk_queue_depth > 64) o.disk_queue_depth = 64;
    o.staging_bytes = std::min<uint64_t>(o.staging_bytes, 4 * kMiB);
    o.cuda_device = -1;
  }

  void Open() {
    cachepawl_options* o = Pick(options_);
    if (o != nullptr) Bound(o->options);
    Make(stores_, o == nullptr,
         [&](cachepawl_store** out) { return cachepawl_store_open(o, out); });
  }
  void StoreQuery() {
    const cachepawl_store* s = Pick(stores_);
    const bool null_out = NullOut();
    int32_t gpu = 0;
    switch (in_.Byte() % 5) {
      case 0:
        Make(layouts_, s == nullptr,
             [&](cachepawl_layout** o) { return cachepawl_store_layout(s, o); });
        break;
      case 1:
        CALL(s == nullptr || null_out, cachepawl_store_gpu_mode(s, null_out ? nullptr : &gpu));
        Check(null_out || s == nullptr || gpu == 0, "GPU mode in a CPU-mode store");
        break;
      case 2:
        MakeString(null_out, s == nullptr,
                   [&](char** o) { return cachepawl_store_stats_json(s, o); });
        break;
      case 3:
        MakeString(null_out, s == nullptr,
                   [&](char** o) { return cachepawl_store_stats_prometheus(s, o); });
        break;
      default: {
        char* e = cachepawl_store_last_error(s);
        Check((e == nullptr) == (s == nullptr), "store_last_error: NULL iff the store is");
        cachepawl_string_free(e);
      }
    }
  }
  void CloseOrFree() {
    const int i = static_cast<int>(in_.Below(kSlots));
    if (in_.Bool()) {
      CALL(stores_[i] == nullptr, cachepawl_store_close(stores_[i]));
    } else {
      Free(stores_[i]);
    }
  }

  void NewPool() {
    const int32_t device = in_.Bool() ? -1 : Enum();
    const bool small = in_.Bool();
    const uint64_t pages = small ? in_.Below(kMaxPoolEntries + 1) : Number();
    const uint64_t slots = small ? in_.Below(kMaxPoolEntries + 1) : Number();
    Make(pools_, false,
         [&](cachepawl_pool** o) { return cachepawl_pool_new(device, pages, slots, o); });
  }
  // NULL, or a new buffer of the harness's (kept until the end of the input).
  void* Memory() {
    static const size_t kSizes[] = {4096, 64 << 10, 1 << 20};
    const uint8_t c = in_.Byte() % 5;
    if (c >= 3) return nullptr;
    buffers_.push_back(std::make_unique<std::vector<std::byte>>(kSizes[c]));
    std::vector<std::byte>& b = *buffers_.back();
    sizes_[b.data()] = b.size();
    return b.data();
  }
  uint64_t Stride() { return (in_.Byte() & 1) != 0 ? 0 : Number(); }
  void SetPool() {
    cachepawl_pool* p = Pick(pools_);
    const size_t i = (in_.Byte() & 3) != 0 ? in_.Byte() % 4 : Number();
    void* a = Memory();
    void* b = Memory();
    const uint64_t sa = Stride(), sb = Stride();
    // The header promises INVALID_ARGUMENT for a NULL pool; NULL bases are refused when set
    // (the code's choice) or at registration ("a layer not set"): only never accepted and used.
    cachepawl_status s = CACHEPAWL_OK;
    switch (in_.Byte() % 4) {
      case 0:
        s = CALL(p == nullptr, cachepawl_pool_set_kv_layer(p, i, a, sa, b, sb));
        // A NULL V is for MLA layers; registration refuses it for any other layer.
        Check(s != CACHEPAWL_OK || a != nullptr, "a NULL K base set");
        break;
      case 1:
        s = CALL(p == nullptr, cachepawl_pool_set_kv_layer_interleaved(p, i, a, sa));
        Check(s != CACHEPAWL_OK || a != nullptr, "a NULL interleaved base set");
        break;
      case 2:
        // NULL bases are for lightning (no conv) and shortconv (no SSM state) layers;
        // registration refuses them for any other layer.
        s = CALL(p == nullptr, cachepawl_pool_set_ssm_layer(p, i, a, sa, b, sb));
        break;
      default:
        s = CALL(p == nullptr, cachepawl_pool_set_block_contiguous(p, a, sa, b, sb));
        Check(s != CACHEPAWL_OK || ((a != nullptr || p->num_pages == 0) &&
                                    (b != nullptr || p->num_state_slots == 0)),
              "a NULL block-contiguous base with entries set");
    }
  }
  // Whether a tensor at `base`, `span` bytes long, lies in the harness's memory (NULL: the
  // store refuses it before touching anything).
  bool Fits(const std::byte* base, uint64_t span) const {
    if (base == nullptr || span == 0) return true;
    auto it = sizes_.find(base);
    return it != sizes_.end() && span <= it->second;
  }
  // Whether registering `p` with `s` keeps every tensor inside its buffer, as Describe()
  // (cachepawl_c_store.cc) and DevicePoolDescription lay them out.
  bool PoolFits(const cachepawl_pool& p, const ModelLayout& l) const {
    if (p.block_contiguous) {
      const uint64_t kv = l.KvPageBytes(), st = l.MambaSlotBytes();
      return Fits(p.kv_base, Span(p.num_pages, p.page_stride ? p.page_stride : kv, kv)) &&
             Fits(p.state_base, Span(p.num_state_slots, p.state_stride ? p.state_stride : st, st));
    }
    for (size_t a = 0; a < p.kv.size(); ++a) {
      const uint64_t kb = a < l.attention_layers.size() ? l.KBytesPerPage(a) : 0;
      const uint64_t vb = a < l.attention_layers.size() ? l.VBytesPerPage(a) : 0;
      const auto& k = p.kv[a];
      if (k.interleaved) {
        const uint64_t stride = k.k_page_stride ? k.k_page_stride : kb + vb;
        if (!Fits(k.k_base, Span(p.num_pages, stride, kb + vb))) return false;
      } else if (!Fits(k.k_base, Span(p.num_pages, k.k_page_stride ? k.k_page_stride : kb, kb)) ||
                 !Fits(k.v_base, Span(p.num_pages, k.v_page_stride ? k.v_page_stride : vb, vb))) {
        return false;
      }
    }
    for (size_t s = 0; s < p.ssm.size(); ++s) {
      const uint64_t cb = s < l.ssm_layers.size() ? l.ConvStateBytes(s) : 0;
      const uint64_t sb = s < l.ssm_layers.size() ? l.SsmStateBytes(s) : 0;
      const auto& m = p.ssm[s];
      if (!Fits(m.conv_base,
                Span(p.num_state_slots, m.conv_slot_stride ? m.conv_slot_stride : cb, cb)) ||
          !Fits(m.ssm_base,
                Span(p.num_state_slots, m.ssm_slot_stride ? m.ssm_slot_stride : sb, sb))) {
        return false;
      }
    }
    return true;
  }
  void RegisterPool() {
    cachepawl_store* s = Pick(stores_);
    const cachepawl_pool* p = Pick(pools_);
    if (s != nullptr && p != nullptr && !PoolFits(*p, s->store().layout())) return;
    CALL(s == nullptr || p == nullptr, cachepawl_store_register_device_pool(s, p));
  }
  void Slots() {
    cachepawl_store* s = Pick(stores_);
    const cachepawl_kind kind = Enum();
    uint64_t slot = (in_.Byte() & 1) != 0 ? in_.Byte() % 8 : Number();
    std::vector<std::byte> record(in_.Bool() ? 4096 : in_.Take<uint16_t>());
    const size_t bytes =
        (in_.Byte() & 3) == 0 ? in_.Take<uint16_t>() % (record.size() + 1) : record.size();
    void* ptr = (in_.Byte() & 7) == 0 ? nullptr : record.data();
    const bool null_span = ptr == nullptr && bytes > 0;
    switch (in_.Byte() % 4) {
      case 0: {
        const bool null_out = NullOut();
        CALL(s == nullptr || null_out,
             cachepawl_store_allocate_device_slot(s, kind, null_out ? nullptr : &slot));
        break;
      }
      case 1:
        CALL(s == nullptr, cachepawl_store_free_device_slot(s, kind, slot));
        break;
      case 2:
        CALL(s == nullptr || null_span,
             cachepawl_store_write_device_record(s, kind, slot, ptr, bytes));
        break;
      default:
        CALL(s == nullptr || null_span,
             cachepawl_store_read_device_record(s, kind, slot, ptr, bytes));
    }
  }

  void HashTokens() {
    const cachepawl_store* s = Pick(stores_);
    const PromptArgs p = Prompt();
    std::vector<uint8_t> out(32 * in_.Below(kMaxTokens + 1));
    const size_t capacity = in_.Bool() ? out.size() / 32 : 0;
    const bool null_count = NullOut();
    size_t count = 0;
    CALL(s == nullptr || p.bad() || null_count,
         cachepawl_store_hash_tokens(s, p.ns, p.ns_len, p.token_data(), p.tokens.size(),
                                     capacity == 0 && in_.Bool() ? nullptr : out.data(), capacity,
                                     null_count ? nullptr : &count));
  }
  void Lookup() {
    cachepawl_store* s = Pick(stores_);
    if (in_.Bool()) {
      const PromptArgs p = Prompt();
      Make(matches_, s == nullptr || p.bad(), [&](cachepawl_match** o) {
        return cachepawl_store_lookup(s, p.ns, p.ns_len, p.token_data(), p.tokens.size(), o);
      });
      return;
    }
    const HashArgs h = Hashes();
    Make(matches_, s == nullptr || h.null_hashes, [&](cachepawl_match** o) {
      return cachepawl_store_lookup_hashes(s, h.data(), h.count(), o);
    });
  }
  void MatchQuery() {
    using Size = cachepawl_status (*)(const cachepawl_match*, size_t*);
    using Tiers = cachepawl_status (*)(const cachepawl_match*, cachepawl_tier*, size_t, size_t*);
    static constexpr Named<Size> kSize[] = {
        NAMED(cachepawl_match_num_pages), NAMED(cachepawl_match_reusable_pages),
        NAMED(cachepawl_match_kv_only_pages), NAMED(cachepawl_match_checkpoint_hint_pages),
        NAMED(cachepawl_match_window_first_page)};
    static constexpr Named<Tiers> kTiers[] = {NAMED(cachepawl_match_page_tiers),
                                              NAMED(cachepawl_match_window_tiers)};
    const cachepawl_match* m = Pick(matches_);
    const bool null_m = m == nullptr;
    // An array result: a buffer of up to 64 hashes (or 512 tiers), a capacity it holds (0 with
    // a NULL buffer is a size query), or NULL with a capacity (refused).
    std::vector<uint8_t> buf(32 * in_.Below(65));
    const bool null_buf = buf.empty() || (in_.Byte() & 3) == 0;
    const size_t items = in_.Bool() ? buf.size() : in_.Byte();  // bytes' worth of items
    switch (in_.Byte() % 5) {
      case 0: {
        const auto& f = Choose(kSize);
        Get<size_t>(
            null_m, [&](size_t* o) { return f.fn(m, o); }, f.name);
        break;
      }
      case 1:
        Get<uint32_t>(
            null_m, [&](uint32_t* o) { return cachepawl_match_page_size_tokens(m, o); },
            "cachepawl_match_page_size_tokens");
        break;
      case 2:
        Get<cachepawl_tier>(
            null_m, [&](cachepawl_tier* o) { return cachepawl_match_state_tier(m, o); },
            "cachepawl_match_state_tier");
        break;
      case 3: {
        const auto& f = Choose(kTiers);
        auto* out = null_buf ? nullptr : reinterpret_cast<cachepawl_tier*>(buf.data());
        const size_t capacity = std::min(items, buf.size() / sizeof(cachepawl_tier));
        Get<size_t>(
            null_m || (out == nullptr && capacity > 0),
            [&](size_t* count) { return f.fn(m, out, capacity, count); }, f.name);
        break;
      }
      default: {
        uint8_t* out = null_buf ? nullptr : buf.data();
        const size_t capacity = std::min(items, buf.size()) / 32;
        Get<size_t>(
            null_m || (out == nullptr && capacity > 0),
            [&](size_t* count) { return cachepawl_match_hashes(m, out, capacity, count); },
            "cachepawl_match_hashes");
      }
    }
  }
  void LockOps() {
    cachepawl_store* s = Pick(stores_);
    const int i = static_cast<int>(in_.Below(kSlots));
    const bool null_out = NullOut();
    switch (in_.Byte() % 4) {
      case 0: {
        const cachepawl_match* m = Pick(matches_);
        const size_t pages = (in_.Byte() & 1) != 0 ? in_.Byte() % 64 : Number();
        MakeAt(locks_[i], null_out, s == nullptr || m == nullptr,
               [&](cachepawl_lock** o) { return cachepawl_store_lock(s, m, pages, o); });
        break;
      }
      case 1:
        CALL(s == nullptr || locks_[i] == nullptr, cachepawl_store_unlock(s, locks_[i]));
        break;
      case 2: {
        size_t n = 0;
        CALL(locks_[i] == nullptr || null_out,
             cachepawl_lock_pages(locks_[i], null_out ? nullptr : &n));
        break;
      }
      default: {
        int32_t b = 0;
        CALL(locks_[i] == nullptr || null_out,
             cachepawl_lock_has_state(locks_[i], null_out ? nullptr : &b));
      }
    }
  }
  void Load() {
    cachepawl_store* s = Pick(stores_);
    const cachepawl_match* m = Pick(matches_);
    const SlotArgs a = DeviceSlots();
    const uint32_t flags = (in_.Byte() & 3) == 0 ? in_.Take<uint32_t>() : in_.Byte() & 1;
    Make(fences_, s == nullptr || m == nullptr || a.null_pages(), [&](cachepawl_fence** o) {
      return cachepawl_store_load(s, m, a.pages, a.n, a.state_slot, a.first, flags, o);
    });
  }
  void Save() {
    cachepawl_store* s = Pick(stores_);
    const SlotArgs a = DeviceSlots();
    const uint64_t depth = (in_.Byte() & 1) != 0 ? 4 * (in_.Byte() % 64) : Number();
    if (in_.Bool()) {
      const PromptArgs p = Prompt();
      Make(fences_, s == nullptr || p.bad() || a.null_pages(), [&](cachepawl_fence** o) {
        return cachepawl_store_save(s, p.ns, p.ns_len, p.token_data(), p.tokens.size(), a.first,
                                    a.pages, a.n, a.state_slot, depth, o);
      });
      return;
    }
    const HashArgs h = Hashes();
    Make(fences_, s == nullptr || h.null_hashes || a.null_pages(), [&](cachepawl_fence** o) {
      return cachepawl_store_save_hashes(s, h.data(), h.count(), a.first, a.pages, a.n,
                                         a.state_slot, depth, o);
    });
  }
  void PrefetchOps() {
    const int i = static_cast<int>(in_.Below(kSlots));
    switch (in_.Byte() % 3) {
      case 0: {
        cachepawl_store* s = Pick(stores_);
        const cachepawl_match* m = Pick(matches_);
        Make(prefetches_, s == nullptr || m == nullptr,
             [&](cachepawl_prefetch** o) { return cachepawl_store_prefetch(s, m, o); });
        break;
      }
      case 1:
        Make(fences_, prefetches_[i] == nullptr,
             [&](cachepawl_fence** o) { return cachepawl_prefetch_fence(prefetches_[i], o); });
        break;
      default:
        CALL(prefetches_[i] == nullptr, cachepawl_prefetch_cancel(prefetches_[i]));
    }
  }
  void FenceOps() {
    const cachepawl_fence* f = Pick(fences_);
    const bool null_out = NullOut();
    const bool nulls = f == nullptr || null_out;
    const size_t layer = (in_.Byte() & 1) != 0 ? in_.Byte() % 8 : Number();
    const uint64_t timeout = in_.Bool() ? CACHEPAWL_WAIT_FOREVER : in_.Byte() % 3;
    int32_t ready = 0;
    size_t n = 0;
    switch (in_.Byte() % 8) {
      case 0:
        CALL(nulls, cachepawl_fence_ready(f, null_out ? nullptr : &ready));
        break;
      case 1:
        CALL(f == nullptr, cachepawl_fence_wait(f, timeout));
        break;
      case 2: {
        cachepawl_status code = 0;
        char* message = nullptr;
        const cachepawl_status s = CALL(
            nulls,
            cachepawl_fence_result(f, null_out ? nullptr : &code, in_.Bool() ? &message : nullptr));
        Check(s == CACHEPAWL_OK || message == nullptr, "fence_result failed with a message");
        cachepawl_string_free(message);
        break;
      }
      case 3:
        CALL(nulls, cachepawl_fence_num_layers(f, null_out ? nullptr : &n));
        break;
      case 4:
        CALL(nulls, cachepawl_fence_layer_ready(f, layer, null_out ? nullptr : &ready));
        break;
      case 5:
        CALL(f == nullptr, cachepawl_fence_wait_layer(f, layer, timeout));
        break;
      case 6: {
        // A non-NULL stream only where the header says what it does with it: a build without
        // CUDA (UNAVAILABLE, or the status of a fired fence).
        static int fake_stream;
        void* stream = !CACHEPAWL_HAVE_CUDA && in_.Bool() ? &fake_stream : nullptr;
        CALL(f == nullptr, cachepawl_fence_stream_wait(f, stream));
        break;
      }
      default:
        CALL(nulls, cachepawl_fence_on_complete(f, null_out ? nullptr : &OnFence, &g_callbacks));
    }
  }
  void Library() {
    const cachepawl_status s = Enum();
    Check(cachepawl_status_name(s) != nullptr, "status_name NULL");
    Check(cachepawl_version() != nullptr && cachepawl_abi_version() == CACHEPAWL_ABI_VERSION,
          "versions");
    const bool null_out = NullOut();
    if (in_.Bool()) {
      MakeString(null_out, false, [](char** o) { return cachepawl_layout_preset_names(o); });
    } else {
      MakeString(null_out, false, [](char** o) { return cachepawl_layout_hf_model_types(o); });
    }
  }

  // ---- Freeing ----

  void Free(cachepawl_layout*& h) { cachepawl_layout_free(std::exchange(h, nullptr)); }
  void Free(cachepawl_options*& h) { cachepawl_options_free(std::exchange(h, nullptr)); }
  void Free(cachepawl_store*& h) { cachepawl_store_free(std::exchange(h, nullptr)); }
  void Free(cachepawl_pool*& h) { cachepawl_pool_free(std::exchange(h, nullptr)); }
  void Free(cachepawl_match*& h) { cachepawl_match_free(std::exchange(h, nullptr)); }
  void Free(cachepawl_lock*& h) { cachepawl_lock_free(std::exchange(h, nullptr)); }
  void Free(cachepawl_fence*& h) { cachepawl_fence_free(std::exchange(h, nullptr)); }
  void Free(cachepawl_prefetch*& h) { cachepawl_prefetch_free(std::exchange(h, nullptr)); }
  void FreeOne() {
    const int i = static_cast<int>(in_.Below(kSlots));
    const int picked = in_.Byte() % 6;  // which of the six handle kinds below
    int kind = 0;
    auto free_picked = [&](auto&... slots) { ((kind++ == picked ? Free(slots[i]) : void()), ...); };
    free_picked(layouts_, options_, pools_, matches_, locks_, fences_);
    // NULL is fine for every *_free.
    cachepawl_layout_free(nullptr);
    cachepawl_store_free(nullptr);
    cachepawl_lock_free(nullptr);
  }
  template <typename T>
  void FreeSlots(T* (&slots)[kSlots]) {
    for (T*& h : slots) Free(h);
  }
  void FreeAll() {
    const bool stores_first = in_.Bool();
    if (stores_first) FreeSlots(stores_);
    FreeSlots(locks_);
    FreeSlots(prefetches_);
    FreeSlots(fences_);
    FreeSlots(matches_);
    FreeSlots(stores_);
    FreeSlots(pools_);
    FreeSlots(options_);
    FreeSlots(layouts_);
  }

  // The operations, by the input's operation byte (several entries for the ones that matter).
  using Op = void (Program::*)();
  // clang-format off
  static constexpr Op kOps[] = {
      &Program::LayoutFromPreset, &Program::LayoutFromJson, &Program::LayoutFromHf,
      &Program::LayoutQuery,      &Program::WriteInputFile, &Program::NewOptions,
      &Program::SetOption,        &Program::SetOption,      &Program::SetOption,
      &Program::Open,             &Program::Open,           &Program::StoreQuery,
      &Program::CloseOrFree,      &Program::NewPool,        &Program::SetPool,
      &Program::SetPool,          &Program::RegisterPool,   &Program::Slots,
      &Program::HashTokens,       &Program::Lookup,         &Program::Lookup,
      &Program::MatchQuery,       &Program::LockOps,        &Program::Load,
      &Program::Save,             &Program::Save,           &Program::PrefetchOps,
      &Program::FenceOps,         &Program::FenceOps,       &Program::Library,
      &Program::FreeOne,          &Program::FreeOne};
  // clang-format on
  static_assert(sizeof(kOps) / sizeof(kOps[0]) == 32);
  void Step(uint8_t op) { (this->*kOps[op % 32])(); }

  FuzzInput& in_;
  const fs::path dir_;
  cachepawl_layout* layouts_[kSlots] = {};
  cachepawl_options* options_[kSlots] = {};
  cachepawl_store* stores_[kSlots] = {};
  cachepawl_pool* pools_[kSlots] = {};
  cachepawl_match* matches_[kSlots] = {};
  cachepawl_lock* locks_[kSlots] = {};
  cachepawl_fence* fences_[kSlots] = {};
  cachepawl_prefetch* prefetches_[kSlots] = {};
  std::deque<std::string> strings_;  // what Text() / Path() / Bytes() point at (never moved)
  std::vector<std::unique_ptr<std::vector<std::byte>>> buffers_;  // device pool memory
  std::map<const std::byte*, size_t> sizes_;                      // buffer start -> bytes
};

}  // namespace
}  // namespace cachepawl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cachepawl::fuzz::FuzzInput in(data, size);
  cachepawl::fuzz::Program(in).Run();
  return 0;
}
