// TierWritePolicy alone: when each disk and remote policy sends an entry to its tier.
#include "store/tier_write_policy.h"

#include <gtest/gtest.h>

namespace cachepawl {
namespace {

EntryKey Key(uint8_t b, Kind kind = Kind::kKV) {
  PageHash h;
  h.bytes.fill(b);
  return {h, kind};
}

TEST(TierWritePolicy, WriteThroughWritesEverySaveAndNothingElse) {
  auto p = TierWritePolicy::Make(WritePolicy::kWriteThrough, 2);
  EXPECT_NE(dynamic_cast<WriteThroughPolicy*>(p.get()), nullptr);
  EXPECT_TRUE(p->OnSaved());
  EXPECT_FALSE(p->OnHit(Key(1)));
  EXPECT_FALSE(p->OnEvict());
}

TEST(TierWritePolicy, SelectiveWritesOnceAtTheNthHitPerEntry) {
  auto p = TierWritePolicy::Make(WritePolicy::kWriteThroughSelective, 3);
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

TEST(TierWritePolicy, WriteBackWritesOnlyOnEviction) {
  auto p = TierWritePolicy::Make(WritePolicy::kWriteBack, 2);
  EXPECT_FALSE(p->OnSaved());
  EXPECT_FALSE(p->OnHit(Key(1)));
  EXPECT_FALSE(p->OnHit(Key(1)));
  EXPECT_TRUE(p->OnEvict());
}

TEST(TierWritePolicy, TheRemotePoliciesMapOntoTheSameRules) {
  EXPECT_EQ(TierWritePolicy::Make(RemoteWritePolicy::kNone, 2), nullptr);  // writes nothing
  auto through = TierWritePolicy::Make(RemoteWritePolicy::kWriteThrough, 2);
  ASSERT_NE(through, nullptr);
  EXPECT_TRUE(through->OnSaved());
  EXPECT_FALSE(through->OnEvict());
  auto selective = TierWritePolicy::Make(RemoteWritePolicy::kSelective, 2);
  ASSERT_NE(selective, nullptr);
  EXPECT_FALSE(selective->OnSaved());
  EXPECT_FALSE(selective->OnHit(Key(1)));
  EXPECT_TRUE(selective->OnHit(Key(1)));  // the second hit
  auto on_evict = TierWritePolicy::Make(RemoteWritePolicy::kOnEvict, 2);
  ASSERT_NE(on_evict, nullptr);
  EXPECT_FALSE(on_evict->OnSaved());
  EXPECT_FALSE(on_evict->OnHit(Key(1)));
  EXPECT_TRUE(on_evict->OnEvict());
}

}  // namespace
}  // namespace cachepawl
