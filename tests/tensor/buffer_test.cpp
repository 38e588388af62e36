// Buffer: zeroed, 64-byte aligned storage.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "tensor/buffer.h"
#include "tensor/context.h"

namespace ntp::tensor {
namespace {

TEST(Buffer, IsZeroAndAlignedSmallOrLarge) {
  for (std::size_t count : {std::size_t{1}, std::size_t{17}, std::size_t{1} << 20, (std::size_t{1} << 22) + 3}) {
    Buffer b(count);
    ASSERT_EQ(b.size(), count);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 64, 0u) << count;
    EXPECT_TRUE(std::all_of(b.data(), b.data() + count, [](float x) { return x == 0.0f; })) << count;
    b.data()[count - 1] = 1.0f;  // the whole span is writable
    b.zero();
    EXPECT_EQ(b.data()[count - 1], 0.0f);
  }
}

// Buffers of 2 MiB or more start on a huge-page boundary, so that the kernel
// can back them with transparent huge pages (a hint: the test checks the
// alignment the hint needs, not that the kernel took it).
TEST(Buffer, LargeBuffersStartOnAHugePage) {
  for (std::size_t count : {std::size_t{1} << 19, (std::size_t{1} << 22) + 3}) {
    Buffer b(count);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % (std::uintptr_t{2} << 20), 0u) << count;
  }
}

// model.huge_pages = false: large buffers are plain 64-byte aligned memory,
// still zeroed; the Context's description says which.
TEST(Buffer, HugePagesCanBeTurnedOff) {
  ASSERT_TRUE(huge_pages());  // the default
  EXPECT_NE(Context({1}).describe().find("; huge pages"), std::string::npos);
  set_huge_pages(false);
  {
    Buffer b((std::size_t{1} << 22) + 3);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 64, 0u);
    EXPECT_TRUE(std::all_of(b.data(), b.data() + b.size(), [](float x) { return x == 0.0f; }));
    EXPECT_NE(Context({1}).describe().find("no huge pages"), std::string::npos);
  }
  set_huge_pages(true);
}

}  // namespace
}  // namespace ntp::tensor
