// IoUringRing: bounded queue, batched submission, one completion per request, fixed buffers.
#include "transfer/io_uring_ring.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "tests/common/test_util.h"

namespace cachepawl {
namespace {

using testing::FillRandom;
using testing::TempDir;

// Collects completions; Wait(n) blocks until n have arrived.
class Collector {
 public:
  void operator()(std::span<const BlockIoCompletion> c) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& x : c) {
      ++count_[x.tag];
      result_[x.tag] = x.result;
    }
    total_ += c.size();
    cv_.notify_all();
  }
  void Wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return total_ >= n; });
  }
  std::map<uint64_t, int> count_;
  std::map<uint64_t, int64_t> result_;
  size_t total_ = 0;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

struct AlignedBuffer {
  explicit AlignedBuffer(size_t n) : bytes(n) {
    data = static_cast<std::byte*>(std::aligned_alloc(4096, n));
  }
  ~AlignedBuffer() { std::free(data); }
  std::byte* data;
  size_t bytes;
};

TEST(IoUringRingTest, OptionsAreValidated) {
  for (uint32_t qd : {0u, 5000u}) {
    IoUringOptions o;
    o.queue_depth = qd;
    auto r = IoUringRing::Open(o);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_NE(r.status().message().find("queue_depth"), std::string::npos);
  }
}

TEST(IoUringRingTest, ManyMoreRequestsThanTheQueueDepthEachCompleteOnce) {
  TempDir dir;
  const std::string path = (dir.path() / "f").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0600);
  ASSERT_GE(fd, 0);
  constexpr size_t kBlocks = 200, kBlock = 8192;
  ASSERT_EQ(::posix_fallocate(fd, 0, kBlocks * kBlock), 0);
  AlignedBuffer src(kBlocks * kBlock), dst(kBlocks * kBlock);
  FillRandom({src.data, src.bytes}, 3);
  std::memset(dst.data, 0, dst.bytes);

  IoUringOptions o;
  o.queue_depth = 4;
  auto ring = IoUringRing::Open(o);
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  Collector c;
  (*ring)->SetCompletionHandler([&](std::span<const BlockIoCompletion> x) { c(x); });
  std::span<std::byte> regions[] = {{src.data, src.bytes}, {dst.data, dst.bytes}};
  ASSERT_TRUE((*ring)->RegisterBuffers(regions).ok());
  EXPECT_EQ((*ring)->RegisterBuffers(regions).code(), Status::Code::kFailedPrecondition);

  std::vector<BlockIoRequest> writes;
  for (size_t i = 0; i < kBlocks; ++i) {
    writes.push_back({BlockIoOp::kWrite, fd, i * kBlock, src.data + i * kBlock, kBlock, i});
  }
  (*ring)->Submit(writes);
  c.Wait(kBlocks);
  std::vector<BlockIoRequest> reads;
  for (size_t i = 0; i < kBlocks; ++i) {
    // Read in reverse order, into different positions.
    const size_t j = kBlocks - 1 - i;
    reads.push_back({BlockIoOp::kRead, fd, j * kBlock, dst.data + j * kBlock, kBlock, 1000 + i});
  }
  (*ring)->Submit(reads);
  c.Wait(2 * kBlocks);
  (*ring)->Shutdown();  // waits for the handler calls to return
  EXPECT_EQ((*ring)->pending(), 0u);
  ASSERT_EQ(c.count_.size(), 2 * kBlocks);
  for (const auto& [tag, n] : c.count_) {
    EXPECT_EQ(n, 1) << tag;
    EXPECT_EQ(c.result_[tag], static_cast<int64_t>(kBlock)) << tag;
  }
  EXPECT_EQ(std::memcmp(src.data, dst.data, src.bytes), 0);
  EXPECT_EQ((*ring)->fixed_requests(), 2 * kBlocks);
  EXPECT_EQ((*ring)->plain_requests(), 0u);
  ::close(fd);
}

TEST(IoUringRingTest, UnregisteredBuffersAndErrorsAreReportedPerRequest) {
  TempDir dir;
  const std::string path = (dir.path() / "f").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::posix_fallocate(fd, 0, 1 << 20), 0);
  AlignedBuffer buf(1 << 16);
  FillRandom({buf.data, buf.bytes}, 1);
  auto ring = IoUringRing::Open({});
  ASSERT_TRUE(ring.ok());
  Collector c;
  (*ring)->SetCompletionHandler([&](std::span<const BlockIoCompletion> x) { c(x); });
  std::vector<BlockIoRequest> reqs = {
      {BlockIoOp::kWrite, fd, 0, buf.data, 4096, 1},       // fine (plain: not registered)
      {BlockIoOp::kWrite, fd, 100, buf.data, 4096, 2},     // misaligned offset: EINVAL
      {BlockIoOp::kRead, -1, 0, buf.data, 4096, 3},        // bad fd: EBADF
      {BlockIoOp::kRead, fd, 2 << 20, buf.data, 4096, 4},  // past the end: 0 bytes
  };
  (*ring)->Submit(reqs);
  c.Wait(4);
  EXPECT_EQ(c.result_[1], 4096);
  EXPECT_EQ(c.result_[2], -EINVAL);
  EXPECT_EQ(c.result_[3], -EBADF);
  EXPECT_EQ(c.result_[4], 0);
  EXPECT_EQ((*ring)->plain_requests(), 4u);
  ::close(fd);
}

TEST(IoUringRingTest, HandlerMaySubmitAndShutdownWaitsForEverything) {
  TempDir dir;
  const std::string path = (dir.path() / "f").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::posix_fallocate(fd, 0, 1 << 20), 0);
  AlignedBuffer buf(4096);
  IoUringOptions o;
  o.queue_depth = 2;
  auto ring = IoUringRing::Open(o);
  ASSERT_TRUE(ring.ok());
  IoUringRing* r = ring->get();
  std::atomic<int> done{0};
  // Each completion submits the next read until 50 have run: a chain.
  r->SetCompletionHandler([&](std::span<const BlockIoCompletion> c) {
    for (const auto& x : c) {
      EXPECT_EQ(x.result, 4096);
      if (++done < 50) {
        const BlockIoRequest next{BlockIoOp::kRead, fd, 0, buf.data, 4096, x.tag + 1};
        r->Submit(std::span<const BlockIoRequest>(&next, 1));
      }
    }
  });
  const BlockIoRequest first{BlockIoOp::kRead, fd, 0, buf.data, 4096, 0};
  r->Submit(std::span<const BlockIoRequest>(&first, 1));
  // Shutdown returns only once the whole chain ran: the handler's submissions are accepted
  // while Shutdown drains, nothing in flight is abandoned.
  while (done.load() == 0) std::this_thread::yield();
  r->Shutdown();
  EXPECT_EQ(done.load(), 50);
  // After Shutdown: each request completes at once with ECANCELED.
  int64_t late = 0;
  r->SetCompletionHandler([&](std::span<const BlockIoCompletion> c) { late = c[0].result; });
  r->Submit(std::span<const BlockIoRequest>(&first, 1));
  EXPECT_EQ(late, -ECANCELED);
  r->Shutdown();  // idempotent
  ::close(fd);
}

}  // namespace
}  // namespace cachepawl
