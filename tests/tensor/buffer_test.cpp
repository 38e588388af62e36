// Buffer: zeroed, 64-byte aligned storage.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
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

// The VmFlags line of the mapping that holds `p` in /proc/self/smaps ("hg":
// asked for huge pages, "nh": asked for none), or "" if none holds it.
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line + " ";
    }
  }
  return "";
}

std::int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * 4096;
}

// The huge-page choice reaches the kernel as a hint on the buffer's own
// mapping: asked for with the default, refused with model.huge_pages = false
// (which matters where THP is "always").
TEST(Buffer, TheMappingCarriesTheHugePageChoice) {
  if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage")) GTEST_SKIP() << "no THP in this kernel";
  const std::size_t count = std::size_t{1} << 22;
  {
    Buffer b(count);
    EXPECT_NE(vm_flags_of(b.data()).find(" hg "), std::string::npos) << vm_flags_of(b.data());
  }
  set_huge_pages(false);
  {
    Buffer b(count);
    EXPECT_NE(vm_flags_of(b.data()).find(" nh "), std::string::npos) << vm_flags_of(b.data());
  }
  set_huge_pages(true);
}

// A large buffer is a mapping of its own: freeing it gives its memory back.
// Each of these buffers is written whole (16 MiB), so 200 of them kept would
// add 3 GiB to the resident size.
TEST(Buffer, FreedLargeBuffersLeaveNothingResident) {
  const std::int64_t before = resident_bytes();
  for (int i = 0; i < 200; ++i) {
    Buffer b(std::size_t{1} << 22);
    std::fill(b.data(), b.data() + b.size(), 1.0f);
  }
  EXPECT_LT(resident_bytes() - before, std::int64_t{256} << 20);
}

}  // namespace
}  // namespace ntp::tensor
