// Every wait inside a Store call is bounded by an option (StoreOptions::host_space_wait_ms,
// host_pinning_wait_ms, stream_wait_ms): the host-space wait gives up after its option with
// NoSpace naming it, and succeeds when room comes within it; a deferred stream wait gives up
// after its bound with TimedOut naming stream_wait_ms; the options are checked.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "store/deferred_stream_waiter.h"
#include "store/store.h"
#include "store/store_faults.h"
#include "tests/common/test_util.h"
#include "tests/store/store_test_checks.h"
#include "tests/store/store_test_util.h"
#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

using testing::TempDir;

// Holds every host -> device operation (a Load's copies) until Release(), so that the Load keeps
// its host sources pinned meanwhile.
class LoadGate {
 public:
  Status Before(const Operation& op) {
    if (op.direction != Direction::kLoad) return Status::OK();
    std::unique_lock<std::mutex> lock(mu_);
    ++held_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    return Status::OK();
  }
  bool WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return held_ > 0; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int held_ = 0;
  bool open_ = false;
};

class StoreWaitsTest : public ::testing::Test {
 protected:
  // A KV-only store whose host tier holds exactly four pages, its Loads held by `gate_`.
  std::unique_ptr<Store> Open(uint32_t host_space_wait_ms) {
    const ModelLayout layout = TinyAttentionOnly();
    StoreOptions o = CpuStoreOptions(layout, 4 * RecordSlotBytes(layout, Kind::kKV), 4 << 20, 0,
                                     dir_.str() + "/store");
    o.host_space_wait_ms = host_space_wait_ms;
    StoreFaultInjection faults;
    faults.before_operation = [this](const Operation& op) { return gate_.Before(op); };
    auto s = OpenStoreWithFaults(o, faults);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // Saves prompt A (four pages: the host tier is full) and starts its Load, held by the gate:
  // every host slot is pinned by a Load in flight.
  void FillAndPinEverything(Store* store, std::future<Status>* load) {
    prompt_a_ = Tokens(1, 16);
    SaveAll(store, "", prompt_a_, /*with_state=*/false);
    auto m = store->Lookup("", prompt_a_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_EQ(m->reusable_pages, 4u);
    *load = std::async(std::launch::async, [store, m = *m] { return LoadAndVerify(store, m); });
    ASSERT_TRUE(gate_.WaitHeld());
  }

  // Saves one page of a new prompt; the Save's status (at the call or from its fence).
  static Status SaveOnePage(Store* store) {
    const std::vector<uint32_t> b = Tokens(1000, 4);
    const auto hashes = store->HashTokens("", b);
    auto slot = store->AllocateDeviceSlot(Kind::kKV);
    if (!slot.ok()) return slot.status();
    const Status written =
        store->WriteDeviceRecord(Kind::kKV, *slot, Content(store->layout(), hashes[0], Kind::kKV));
    if (!written.ok()) return written;
    SaveRequest req;
    req.tokens = b;
    const std::vector<uint64_t> pages = {*slot};
    req.device_pages = pages;
    auto fence = store->Save(req);
    const Status s = fence.ok() ? fence->Wait(std::chrono::seconds(60)) : fence.status();
    (void)store->FreeDeviceSlot(Kind::kKV, *slot);
    return s;
  }

  TempDir dir_;
  LoadGate gate_;
  std::vector<uint32_t> prompt_a_;
};

TEST_F(StoreWaitsTest, AFullHostTierWaitsHostSpaceWaitMsThenSaysNoSpaceNamingIt) {
  auto store = Open(/*host_space_wait_ms=*/300);
  ASSERT_NE(store, nullptr);
  std::future<Status> load;
  FillAndPinEverything(store.get(), &load);
  const Status s = SaveOnePage(store.get());
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  EXPECT_NE(s.message().find("host_space_wait_ms 300 ms"), std::string::npos) << s.ToString();
  gate_.Release();
  EXPECT_TRUE(load.get().ok());                // the held Load still delivers every byte
  EXPECT_TRUE(SaveOnePage(store.get()).ok());  // room now: A's pages are evictable
}

TEST_F(StoreWaitsTest, ASaveWaitingForHostSpaceGetsItWhenTheLoadInFlightEnds) {
  auto store = Open(/*host_space_wait_ms=*/60000);
  ASSERT_NE(store, nullptr);
  std::future<Status> load;
  FillAndPinEverything(store.get(), &load);
  auto save = std::async(std::launch::async, [&] { return SaveOnePage(store.get()); });
  EXPECT_EQ(save.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "the Save should wait for room while the Load pins every host slot";
  gate_.Release();
  EXPECT_TRUE(load.get().ok());
  const Status saved = save.get();
  EXPECT_TRUE(saved.ok()) << saved.ToString();
}

TEST(DeferredStreamWaiterTest, AnUnresolvedWaitGivesUpAfterItsBoundNamingStreamWaitMs) {
  DeferredStreamWaiter waiter(std::chrono::milliseconds(50));
  const Status s = waiter.Wait(reinterpret_cast<void*>(0x1));
  EXPECT_TRUE(s.IsTimedOut()) << s.ToString();
  EXPECT_NE(s.message().find("stream_wait_ms 50 ms"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("nothing was enqueued"), std::string::npos) << s.ToString();
}

TEST(DeferredStreamWaiterTest, AResolvedWaitRunsTheMoversWaiterOnTheStream) {
  DeferredStreamWaiter waiter(std::chrono::seconds(30));
  void* seen = nullptr;
  auto resolve = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    waiter.Resolve([&](void* stream) {
      seen = stream;
      return Status::OK();
    });
  });
  EXPECT_TRUE(waiter.Wait(reinterpret_cast<void*>(0x2)).ok());
  EXPECT_EQ(seen, reinterpret_cast<void*>(0x2));
  resolve.get();
  DeferredStreamWaiter failed_load(std::chrono::seconds(30));
  failed_load.Resolve({});  // the load failed: nothing reaches the GPU, nothing to wait for
  EXPECT_TRUE(failed_load.Wait(reinterpret_cast<void*>(0x3)).ok());
}

TEST(StoreWaitOptionsTest, EachWaitIsCheckedNamingItsField) {
  for (const char* field : {"host_space_wait_ms", "host_pinning_wait_ms", "stream_wait_ms"}) {
    StoreOptions o;
    o.layout_name = "tiny";
    const std::string f = field;
    uint32_t& ms = f == "host_space_wait_ms"     ? o.host_space_wait_ms
                   : f == "host_pinning_wait_ms" ? o.host_pinning_wait_ms
                                                 : o.stream_wait_ms;
    ms = 86'400'000;
    EXPECT_TRUE(o.Validate().ok()) << o.Validate().ToString();
    ms = 86'400'001;
    const Status s = o.Validate();
    EXPECT_TRUE(s.IsInvalidArgument()) << field;
    EXPECT_NE(s.message().find(std::string("StoreOptions.") + field + ": 86400001"),
              std::string::npos)
        << s.ToString();
  }
  StoreOptions o;
  o.layout_name = "tiny";
  o.remote.seeds = "redis://127.0.0.1:6379";
  o.remote.reader_threads = 0;
  EXPECT_NE(o.Validate().message().find("remote.reader_threads: 0"), std::string::npos)
      << o.Validate().ToString();
  o.remote.reader_threads = 65;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o.remote.reader_threads = 64;
  EXPECT_TRUE(o.Validate().ok()) << o.Validate().ToString();
}

}  // namespace
}  // namespace cachepawl
