// model.init_from: the file says its format (llm.c or llama2.c) and so the
// model's family; a model.family the file contradicts, a file of neither
// format and a truncated file of each are refused naming the key.
#include "train/model_setup.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "model/model_file.h"
#include "model/parameters.h"

namespace ntp::train {
namespace {

namespace fs = std::filesystem;

class InitFrom : public ::testing::Test {
 protected:
  InitFrom() : dir_(fs::temp_directory_path() / ("ntp-init-from-" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
  }
  ~InitFrom() override { fs::remove_all(dir_); }

  // A model file of `config` (llm.c for GPT-2, llama2.c for Llama).
  std::string written(const char* name, const model::GptConfig& config) const {
    const std::string path = (dir_ / name).string();
    model::write_model_file(path, config, std::vector<float>(static_cast<std::size_t>(parameter_count(config)), 0.5f));
    return path;
  }
  std::string truncated(const std::string& path) const {
    const std::string copy = path + ".short";
    fs::copy_file(path, copy);
    fs::resize_file(copy, fs::file_size(path) - 4);
    return copy;
  }
  static ModelConfig keys(const std::string& init_from, model::Family family = model::Family::kGpt2) {
    ModelConfig k;
    k.family = family;
    k.init_from = init_from;
    return k;
  }
  // The ConfigError's message of resolve_model, or "accepted".
  static std::string refusal(const ModelConfig& k) {
    try {
      resolve_model(k, 0);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "accepted";
  }

  fs::path dir_;
  model::GptConfig gpt2_ = model::preset("tiny");
  model::GptConfig llama_ = model::preset("llama-tiny", model::Family::kLlama);
};

TEST_F(InitFrom, TheFileSaysTheFamilyWhenModelFamilyIsLeftOut) {
  const std::string llmc = written("gpt2.bin", gpt2_), llama2c = written("llama.bin", llama_);
  EXPECT_EQ(resolve_model(keys(llmc), 0).gpt, gpt2_);
  EXPECT_EQ(resolve_model(keys(llama2c), 0).gpt, llama_);  // no model.family = "llama" needed
  EXPECT_EQ(resolve_model(keys(llama2c, model::Family::kLlama), 0).gpt, llama_);
}

TEST_F(InitFrom, AModelFamilyTheFileContradictsNamesTheFormatAndTheKey) {
  const std::string llmc = written("gpt2.bin", gpt2_);
  const std::string why = refusal(keys(llmc, model::Family::kLlama));
  EXPECT_EQ(why, "model.family = \"llama\", but model.init_from = '" + llmc +
                     "' holds a gpt2 model (llm.c's format): set model.family = \"gpt2\" or leave the key out "
                     "(the file says the family)");
}

TEST_F(InitFrom, AFileOfNeitherFormatNamesBothChecks) {
  const std::string text = (dir_ / "notes.txt").string();
  std::ofstream(text) << "not a model\n";
  const std::string why = refusal(keys(text));
  EXPECT_EQ(why.rfind("model.init_from: " + text + ": neither an llm.c checkpoint (header[0] magic is ", 0), 0u) << why;
  EXPECT_NE(why.find("expected 20240326) nor a llama2.c checkpoint ("), std::string::npos) << why;
}

TEST_F(InitFrom, ATruncatedFileOfEachFormatIsRefused) {
  const std::string llmc = truncated(written("gpt2.bin", gpt2_));
  std::string why = refusal(keys(llmc));
  EXPECT_EQ(why.rfind("model.init_from: " + llmc + ": parameters: truncated", 0), 0u) << why;
  const std::string llama2c = truncated(written("llama.bin", llama_));
  for (model::Family family : {model::Family::kGpt2, model::Family::kLlama}) {
    why = refusal(keys(llama2c, family));
    EXPECT_EQ(why.rfind("model.init_from: " + llama2c + ": neither an llm.c checkpoint", 0), 0u) << why;
    EXPECT_NE(why.find("nor a llama2.c checkpoint (size: file has " + std::to_string(fs::file_size(llama2c)) +
                       " bytes"),
              std::string::npos)
        << why;
  }
}

// The run names the model that trains: a checkpoint's file and its shape,
// never the preset model.preset would have given (the "tiny" of a GPT-2
// checkpoint); a preset by name and the shape its keys give it.
TEST_F(InitFrom, TheModelIsNamedByItsFileAndShapeNotByThePreset) {
  model::GptConfig wide = gpt2_;
  wide.layers = 3;
  wide.d_model = 96;
  wide.heads = 6;
  const std::string llmc = written("wide.bin", wide);
  const std::string said = describe_model(keys(llmc));
  EXPECT_EQ(said, fmt::format("{} (gpt2: 3 layers, 6 heads, hidden 96, vocab {}, {:.1f}M parameters)", llmc,
                              wide.vocab, static_cast<double>(model::parameter_count(wide)) / 1e6));
  EXPECT_EQ(said.find("tiny"), std::string::npos) << said;
  ModelConfig preset;
  preset.layers = 1;
  EXPECT_EQ(describe_model(preset).rfind("tiny (gpt2: 1 layer, ", 0), 0u) << describe_model(preset);
  EXPECT_NE(describe_model(keys(written("llama.bin", llama_))).find(" KV heads, "), std::string::npos);
  // A file that cannot be read says why in place of the shape; nothing throws.
  EXPECT_NE(describe_model(keys((dir_ / "missing.bin").string())).find("missing.bin (model.init_from: "),
            std::string::npos)
      << describe_model(keys((dir_ / "missing.bin").string()));
}

}  // namespace
}  // namespace ntp::train
