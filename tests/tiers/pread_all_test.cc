// PreadAll: a whole range is read at its offset; a range past the end of the file and a
// descriptor that cannot be read are errors that begin with the caller's context.
#include "tiers/pread_all.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <fstream>
#include <string>
#include <vector>

#include "tests/common/test_util.h"

namespace cachepawl {
namespace {

using testing::TempDir;

class PreadAllTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (dir_.path() / "data").string();
    std::ofstream out(path_, std::ios::binary);
    for (int i = 0; i < 8192; ++i) out.put(static_cast<char>(i % 251));
    out.close();
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    if (fd_ >= 0) ::close(fd_);
  }

  TempDir dir_;
  std::string path_;
  int fd_ = -1;
};

TEST_F(PreadAllTest, ReadsTheWholeRangeAtItsOffset) {
  std::vector<std::byte> out(5000);
  ASSERT_TRUE(PreadAll(fd_, out, 3000, "reading data").ok());
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i], static_cast<std::byte>((3000 + i) % 251)) << "byte " << i;
  }
  EXPECT_TRUE(PreadAll(fd_, std::span<std::byte>(), 8192, "reading nothing").ok());
}

TEST_F(PreadAllTest, ARangePastTheEndSaysHowMuchTheFileHeld) {
  std::vector<std::byte> out(4096);
  Status s = PreadAll(fd_, out, 6144, "disk record kv:1");
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_EQ(s.message(), "disk record kv:1: the file ends after 2048 of 4096 bytes");
  s = PreadAll(fd_, out, 1 << 20, "disk record kv:2");
  EXPECT_EQ(s.message(), "disk record kv:2: the file ends after 0 of 4096 bytes");
}

TEST_F(PreadAllTest, ADescriptorThatCannotBeReadIsTheErrnos) {
  const int write_only = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(write_only, 0);
  std::vector<std::byte> out(16);
  Status s = PreadAll(write_only, out, 0, "reading data");
  ::close(write_only);
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_EQ(s.message().rfind("reading data: pread: ", 0), 0u) << s.ToString();
  EXPECT_NE(s.message().find("(errno " + std::to_string(EBADF) + ")"), std::string::npos)
      << s.ToString();
}

}  // namespace
}  // namespace cachepawl
