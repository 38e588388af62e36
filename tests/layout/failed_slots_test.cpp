#include "layout/failed_slots.h"

#include <gtest/gtest.h>

namespace ntp::layout {
namespace {

std::string parse_error(std::string_view spec) {
  try {
    parse_failed_slots(spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(FailedSlots, ParsesAndFormats) {
  const FailedSlots f = parse_failed_slots("0:2,5; 3: 7");
  EXPECT_EQ(f, (FailedSlots{{0, {2, 5}}, {3, {7}}}));
  EXPECT_EQ(format_failed_slots(f), "0:2,5;3:7");
  EXPECT_EQ(parse_failed_slots(format_failed_slots(f)), f);
  EXPECT_TRUE(parse_failed_slots("").empty());
  EXPECT_TRUE(parse_failed_slots("  ").empty());
}

TEST(FailedSlots, ErrorsNameTheOffendingItem) {
  EXPECT_EQ(parse_error("0:1,1"), "duplicate slot 1 of replica 0");
  EXPECT_EQ(parse_error("0:1;0:2"), "replica 0 listed twice");
  EXPECT_EQ(parse_error("0-1"), "malformed entry '0-1' (expected REPLICA:SLOT[,SLOT...])");
  EXPECT_EQ(parse_error("0:1;"), "malformed entry '' (expected REPLICA:SLOT[,SLOT...])");
  EXPECT_NE(parse_error("x:1").find("bad replica 'x'"), std::string::npos);
  EXPECT_NE(parse_error("0:1,a").find("bad slot 'a' in entry '0:1,a'"), std::string::npos);
  EXPECT_NE(parse_error("0:").find("bad slot ''"), std::string::npos);
  EXPECT_NE(parse_error("0:-1").find("bad slot '-1'"), std::string::npos);
  EXPECT_NE(parse_error("0:99999999999").find("bad slot"), std::string::npos);
}

TEST(FailedSlots, ValidationChecksRanges) {
  EXPECT_NO_THROW(validate_failed_slots({{1, {0, 7}}}, 2, 8));
  EXPECT_THROW(validate_failed_slots({{2, {0}}}, 2, 8), std::invalid_argument);
  try {
    validate_failed_slots({{1, {8}}}, 2, 8);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "failed slot 8 of replica 1 out of range [0, 8)");
  }
  EXPECT_THROW(validate_failed_slots({{1, {3, 3}}}, 2, 8), std::invalid_argument);
}

}  // namespace
}  // namespace ntp::layout
