#include "train/dataset.h"

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "train/config.h"

namespace ntp::train {
namespace {

namespace fs = std::filesystem;

class DataIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ntp_dataset_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A token file of `tokens` under `name`; its identity as the job reads it.
  DataIdentity write(const std::string& name, const std::vector<std::uint16_t>& tokens) {
    const std::string path = (dir_ / name).string();
    model::TokenData::write_token_file(path, tokens);
    return identity_of(model::TokenData::read_token_file(path), path);
  }
  fs::path dir_;
};

const std::vector<std::uint16_t> kTokens = {5, 17, 17, 400, 2, 9, 31000, 8, 8, 1};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST_F(DataIdentityTest, TheSameTokensGiveTheSameIdentityAndItSurvivesJson) {
  const DataIdentity a = write("a.bin", kTokens);
  const DataIdentity b = write("b.bin", kTokens);
  EXPECT_EQ(a.tokens, 10);
  EXPECT_TRUE(a.same_tokens(b));  // the name is not part of the contents
  const DataIdentity back = DataIdentity::from_json(a.to_json());
  EXPECT_EQ(back.path, a.path);
  EXPECT_EQ(back.tokens, a.tokens);
  EXPECT_EQ(back.checksum, a.checksum);
  EXPECT_THROW(DataIdentity::from_json({{"path", "x"}, {"tokens", 3}, {"checksum", "12zz"}}), std::exception);
}

// Every token, changed by one, and the file cut by one token: each is seen.
TEST_F(DataIdentityTest, AnyChangedTokenOrLengthChangesTheIdentity) {
  const DataIdentity base = write("base.bin", kTokens);
  for (std::size_t i = 0; i < kTokens.size(); ++i) {
    std::vector<std::uint16_t> changed = kTokens;
    ++changed[i];
    EXPECT_FALSE(base.same_tokens(write("changed.bin", changed))) << "token " << i;
  }
  const std::vector<std::uint16_t> shorter(kTokens.begin(), kTokens.end() - 1);
  EXPECT_FALSE(base.same_tokens(write("shorter.bin", shorter)));
}

TEST_F(DataIdentityTest, ARankReadingOtherDataThanTheJobRecordedIsRefusedNamingTheFileAndTheRecord) {
  const DataIdentity started = write("train.bin", kTokens);
  const DataIdentity val = write("val.bin", {1, 2, 3, 4});
  check_job_data(dir_, JobData{started, val});  // no record yet: nothing to check
  record_job_data(dir_, JobData{started, val});
  check_job_data(dir_, JobData{started, val});
  check_job_data(dir_, started);

  std::vector<std::uint16_t> rewritten = kTokens;
  rewritten[3] = 401;
  const DataIdentity now = write("train.bin", rewritten);
  const std::string why = message_of([&] { check_job_data(dir_, now); });
  EXPECT_NE(why.find("data.path: " + started.path + " holds 10 tokens, checksum "), std::string::npos) << why;
  EXPECT_NE(why.find("but this job started on " + started.describe() + " (" + (dir_ / "data.json").string() + ")"),
            std::string::npos)
      << why;
  EXPECT_NE(message_of([&] { check_job_data(dir_, JobData{now, val}); }), "");

  const DataIdentity other_val = write("val2.bin", {1, 2, 3, 5});
  EXPECT_NE(message_of([&] { check_job_data(dir_, JobData{started, other_val}); }).find("data.val_path: "),
            std::string::npos);
  EXPECT_NE(message_of([&] { check_job_data(dir_, JobData{started, std::nullopt}); })
                .find("data.val_path: unset on this rank, but this job started with one"),
            std::string::npos);
}

TEST_F(DataIdentityTest, AMalformedRecordIsAnErrorNamingIt) {
  const DataIdentity started = write("train.bin", kTokens);
  std::ofstream(dir_ / "data.json") << "{\"train\": {\"path\": 3}}";
  const std::string why = message_of([&] { check_job_data(dir_, started); });
  EXPECT_NE(why.find((dir_ / "data.json").string() + ": malformed"), std::string::npos) << why;
}

}  // namespace
}  // namespace ntp::train
