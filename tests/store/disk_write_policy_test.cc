// DiskWritePolicy alone: when each policy sends an entry to disk.
#include "store/disk_write_policy.h"

#include <gtest/gtest.h>

namespace cachepawl {
namespace {

EntryKey Key(uint8_t b, Kind kind = Kind::kKV) {
  PageHash h;
  h.bytes.fill(b);
  return {h, kind};
}

TEST(DiskWritePolicy, WriteThroughWritesEverySaveAndNothingElse) {
  auto p = DiskWritePolicy::Make(WritePolicy::kWriteThrough, 2);
  EXPECT_EQ(p->policy(), WritePolicy::kWriteThrough);
  EXPECT_TRUE(p->OnSaved());
  EXPECT_FALSE(p->OnHit(Key(1)));
  EXPECT_FALSE(p->OnEvict());
}

TEST(DiskWritePolicy, SelectiveWritesOnceAtTheNthHitPerEntry) {
  auto p = DiskWritePolicy::Make(WritePolicy::kWriteThroughSelective, 3);
  EXPECT_FALSE(p->OnSaved());
  EXPECT_FALSE(p->OnEvict());
  EXPECT_FALSE(p->OnHit(Key(1)));
  EXPECT_FALSE(p->OnHit(Key(1)));
  EXPECT_FALSE(p->OnHit(Key(2)));                // another entry counts apart
  EXPECT_FALSE(p->OnHit(Key(1, Kind::kMamba)));  // so does the state of the same page
  EXPECT_TRUE(p->OnHit(Key(1)));                 // the third hit
  EXPECT_FALSE(p->OnHit(Key(1)));                // once only
  p->Forget(Key(1));                             // the entry left every tier
  EXPECT_FALSE(p->OnHit(Key(1)));
  EXPECT_FALSE(p->OnHit(Key(1)));
  EXPECT_TRUE(p->OnHit(Key(1)));  // counted afresh
  SelectiveWritePolicy once(0);   // 0 behaves as 1: the first hit writes
  EXPECT_TRUE(once.OnHit(Key(9)));
}

TEST(DiskWritePolicy, WriteBackWritesOnlyOnEviction) {
  auto p = DiskWritePolicy::Make(WritePolicy::kWriteBack, 2);
  EXPECT_FALSE(p->OnSaved());
  EXPECT_FALSE(p->OnHit(Key(1)));
  EXPECT_FALSE(p->OnHit(Key(1)));
  EXPECT_TRUE(p->OnEvict());
}

}  // namespace
}  // namespace cachepawl
