// The text form of slot speeds ("R:s,s,...;R:...") and its validation.
#include "layout/slot_speeds.h"

#include <gtest/gtest.h>

#include <limits>

namespace ntp::layout {
namespace {

std::string parse_error(std::string_view spec) {
  try {
    parse_slot_speeds(spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(SlotSpeeds, ParsesOneSpeedPerSlotPerReplica) {
  EXPECT_EQ(parse_slot_speeds("0:1,1,0.5,1; 2: 1, 0.25 ,1,1"),
            (SlotSpeeds{{0, {1, 1, 0.5, 1}}, {2, {1, 0.25, 1, 1}}}));
  EXPECT_TRUE(parse_slot_speeds(" ").empty());
  EXPECT_EQ(speeds_of({{1, {1, 0.5, 0.75}}}, 1, {0, 2}), (std::vector<double>{1, 0.75}));
  EXPECT_EQ(speeds_of({{1, {1, 0.5, 0.75}}}, 0, {0, 2}), (std::vector<double>{1, 1}));
}

TEST(SlotSpeeds, ErrorsNameTheItem) {
  EXPECT_EQ(parse_error("0:1,x"), "bad speed 'x' in entry '0:1,x' (expected a number)");
  EXPECT_EQ(parse_error("0:1;0:1"), "replica 0 listed twice");
  EXPECT_NE(parse_error("1.5"), "accepted");
  EXPECT_NE(parse_error("a:1"), "accepted");
  EXPECT_THROW(validate_slot_speeds({{2, {1, 1}}}, 2, 2), std::invalid_argument);
  try {
    validate_slot_speeds({{0, {1, 1, 1}}}, 1, 2);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "3 speeds for replica 0, expected one per slot (2)");
  }
  EXPECT_THROW(validate_slot_speeds({{0, {1, 0}}}, 1, 2), std::invalid_argument);
  EXPECT_THROW(validate_slot_speeds({{0, {1, std::numeric_limits<double>::infinity()}}}, 1, 2),
               std::invalid_argument);
}

}  // namespace
}  // namespace ntp::layout
