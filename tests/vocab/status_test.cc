#include "vocab/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace cachepawl {
namespace {

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::OK().ok());
  EXPECT_EQ(Status::OK().ToString(), "OK");
  Status s = Status::InvalidArgument("page_size: 0");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_EQ(s.ToString(), "InvalidArgument: page_size: 0");
  EXPECT_EQ(s.WithContext("layout").message(), "layout: page_size: 0");
  EXPECT_TRUE(Status::OK().WithContext("x").ok());
}

TEST(StatusTest, FromErrnoNamesTheErrorAndMapsEnospc) {
  Status eio = Status::FromErrno("write data.0", EIO);
  EXPECT_TRUE(eio.IsIOError());
  EXPECT_NE(eio.message().find("write data.0"), std::string::npos);
  EXPECT_NE(eio.message().find("errno 5"), std::string::npos);
  EXPECT_TRUE(Status::FromErrno("fallocate", ENOSPC).IsNoSpace());
}

StatusOr<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("x: " + std::to_string(x) + " (odd)");
  return x / 2;
}

Status UseHalf(int x, int* out) {
  CACHEPAWL_ASSIGN_OR_RETURN(int h, Half(x));
  *out = h;
  return Status::OK();
}

TEST(StatusTest, StatusOrCarriesValueOrError) {
  int out = 0;
  EXPECT_TRUE(UseHalf(8, &out).ok());
  EXPECT_EQ(out, 4);
  Status s = UseHalf(3, &out);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_EQ(s.message(), "x: 3 (odd)");
  StatusOr<int> bad{Status::OK()};
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kInternal);
}

}  // namespace
}  // namespace cachepawl
