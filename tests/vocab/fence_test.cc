#include "vocab/fence.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "vocab/internal/fence_access.h"

namespace cachepawl {
namespace {

using std::chrono::milliseconds;

TEST(FenceTest, EmptyFenceIsReady) {
  Fence f;
  EXPECT_TRUE(f.Ready());
  EXPECT_TRUE(f.Wait(milliseconds(0)).ok());
  EXPECT_TRUE(f.StreamWait(nullptr).ok());
}

TEST(FenceTest, CompletesOnceWithFirstStatus) {
  FenceCompleter c;
  Fence f = c.fence();
  EXPECT_FALSE(f.Ready());
  EXPECT_TRUE(f.Wait(milliseconds(1)).IsTimedOut());
  EXPECT_EQ(f.status().code(), Status::Code::kFailedPrecondition);
  c.Complete(Status::IOError("disk"));
  c.Complete(Status::OK());
  EXPECT_TRUE(f.Ready());
  EXPECT_TRUE(f.Wait().IsIOError());
  EXPECT_TRUE(f.status().IsIOError());
}

TEST(FenceTest, AbandonedCompleterFiresAborted) {
  Fence f;
  {
    FenceCompleter c;
    f = c.fence();
  }
  EXPECT_TRUE(f.Ready());
  EXPECT_TRUE(f.status().IsAborted());
}

TEST(FenceTest, LayersFireIndividuallyThenAllOnComplete) {
  FenceCompleter c(3);
  Fence f = c.fence();
  EXPECT_EQ(f.num_layers(), 3u);
  c.CompleteLayer(1);
  EXPECT_TRUE(f.LayerReady(1));
  EXPECT_FALSE(f.LayerReady(0));
  EXPECT_TRUE(f.WaitLayer(1, milliseconds(0)).ok());
  EXPECT_TRUE(f.WaitLayer(0, milliseconds(1)).IsTimedOut());
  EXPECT_TRUE(f.WaitLayer(7, milliseconds(0)).IsInvalidArgument());
  c.Complete(Status::Corruption("x"));
  EXPECT_TRUE(f.WaitLayer(0).IsCorruption());
  EXPECT_TRUE(f.WaitLayer(1).ok());  // it had already fired OK
}

TEST(FenceTest, LayerCallbacksRunWhenTheirLayerFiresOrWithTheWholeFence) {
  FenceCompleter c(3);
  Fence f = c.fence();
  std::vector<std::string> seen;
  auto note = [&](std::string what) {
    return [&seen, what](const Status& s) { seen.push_back(what + ":" + s.ToString()); };
  };
  ASSERT_TRUE(f.OnLayerComplete(0, note("l0")).ok());
  ASSERT_TRUE(f.OnLayerComplete(2, note("l2")).ok());
  f.OnComplete(note("all"));
  EXPECT_TRUE(f.OnLayerComplete(3, note("none")).IsInvalidArgument());
  c.CompleteLayer(0);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], "l0:OK");
  ASSERT_TRUE(f.OnLayerComplete(0, note("late")).ok());  // already fired: runs at once
  ASSERT_EQ(seen.size(), 2u);
  c.Complete(Status::Corruption("x"));
  // Layer 2 fires with the fence's status, before the fence's own callbacks.
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[2].substr(0, 3), "l2:");
  EXPECT_NE(seen[2].find("Corruption"), std::string::npos);
  EXPECT_EQ(seen[3].substr(0, 4), "all:");
  EXPECT_TRUE(Fence().OnLayerComplete(0, note("empty")).IsInvalidArgument());
}

TEST(FenceTest, CallbacksRunOnceAfterOrAtCompletion) {
  FenceCompleter c;
  Fence f = c.fence();
  std::atomic<int> calls{0};
  f.OnComplete([&](const Status& s) {
    EXPECT_TRUE(s.ok());
    calls++;
  });
  c.Complete(Status::OK());
  f.OnComplete([&](const Status& s) {
    EXPECT_TRUE(s.ok());
    calls++;
  });
  EXPECT_EQ(calls.load(), 2);
}

TEST(FenceTest, WaitersOnOtherThreadsWakeUp) {
  FenceCompleter c;
  Fence f = c.fence();
  std::atomic<int> woke{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&] {
      if (f.Wait().ok()) woke++;
    });
  }
  c.Complete(Status::OK());
  for (auto& t : waiters) t.join();
  EXPECT_EQ(woke.load(), 4);
}

TEST(FenceTest, AWaitThatPollsFirstSeesTheStatusAndStillTimesOut) {
  // Polling (FenceAccess::SetWaitSpin, the device mover's GPU fences) changes how a waiter
  // waits, not what it sees: a fence fired while it polls, one fired after the poll gave way to
  // sleeping, and one that never fires within the timeout (shorter than the poll).
  {
    FenceCompleter c;
    Fence f = c.fence();
    internal::FenceAccess::SetWaitSpin(f, 1000000);
    EXPECT_EQ(internal::FenceAccess::WaitSpin(f), 1000000u);
    std::thread t([&] { c.Complete(Status::IOError("copy")); });
    const Status s = f.Wait();
    t.join();
    EXPECT_TRUE(s.IsIOError()) << s.ToString();
  }
  {
    FenceCompleter c;
    Fence f = c.fence();
    internal::FenceAccess::SetWaitSpin(f, 100);
    std::thread t([&] {
      std::this_thread::sleep_for(milliseconds(20));
      c.Complete(Status::OK());
    });
    EXPECT_TRUE(f.Wait().ok());
    t.join();
  }
  {
    FenceCompleter c;
    Fence f = c.fence();
    internal::FenceAccess::SetWaitSpin(f, 1000000);
    EXPECT_TRUE(f.Wait(milliseconds(5)).IsTimedOut());
    c.Complete(Status::OK());
    EXPECT_TRUE(f.Wait(milliseconds(0)).ok());
  }
  Fence empty;
  internal::FenceAccess::SetWaitSpin(empty, 5);  // no effect, no crash
  EXPECT_EQ(internal::FenceAccess::WaitSpin(empty), 0u);
}

TEST(FenceTest, StreamWaitWithoutGpuSignalIsAnErrorNotAHang) {
  FenceCompleter c;
  Fence f = c.fence();
  int fake_stream = 0;
  EXPECT_TRUE(f.StreamWait(&fake_stream).IsUnavailable());
  c.Complete(Status::OK());
}

}  // namespace
}  // namespace cachepawl
