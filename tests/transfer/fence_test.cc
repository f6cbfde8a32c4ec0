#include "transfer/fence.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

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

TEST(FenceTest, StreamWaitWithoutGpuSignalIsAnErrorNotAHang) {
  FenceCompleter c;
  Fence f = c.fence();
  int fake_stream = 0;
  EXPECT_TRUE(f.StreamWait(&fake_stream).IsUnavailable());
  c.Complete(Status::OK());
}

}  // namespace
}  // namespace cachepawl
