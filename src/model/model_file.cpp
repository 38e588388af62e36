#include "model/model_file.h"

#include <stdexcept>

#include "model/binary_file.h"
#include "model/llama2c_checkpoint.h"

namespace ntp::model {

namespace {

// "<path>: <field>: <why>" without its "<path>: ", for a message that names the path once.
std::string without_path(const std::string& path, const std::string& what) {
  const std::string prefix = path + ": ";
  return what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
}

}  // namespace

const char* to_string(ModelFileFormat format) { return format == ModelFileFormat::kLlmc ? "llm.c" : "llama2.c"; }

ModelFileHeader read_model_header(const std::string& path) {
  std::int32_t first = 0;
  std::string not_llmc;
  {
    BinaryReader in(path);
    if (in.size() < sizeof(first)) {
      not_llmc = "header[0] magic: the file has " + std::to_string(in.size()) + " bytes";
    } else {
      in.read(&first, 1, "header");
      not_llmc = "header[0] magic is " + std::to_string(first) + ", expected " + std::to_string(kLlmcCheckpointMagic);
    }
  }
  if (first == kLlmcCheckpointMagic) return {ModelFileFormat::kLlmc, read_llmc_config(path)};
  try {
    return {ModelFileFormat::kLlama2c, read_llama2c_config(path)};
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ": neither an llm.c checkpoint (" + not_llmc + ") nor a llama2.c checkpoint (" +
                             without_path(path, e.what()) + ")");
  }
}

LlmcCheckpoint read_model_file(const std::string& path) {
  return read_model_header(path).format == ModelFileFormat::kLlmc ? read_llmc_checkpoint(path)
                                                                  : read_llama2c_checkpoint(path);
}

void read_model_shard(const std::string& path, const ParameterLayout& layout, std::span<float> values) {
  if (layout.config().llama()) read_llama2c_shard(path, layout, values);
  else read_llmc_shard(path, layout, values);
}

void write_model_file(const std::string& path, const GptConfig& config, std::span<const float> full_params) {
  if (config.llama()) write_llama2c_checkpoint(path, config, full_params);
  else write_llmc_checkpoint(path, config, full_params);
}

}  // namespace ntp::model
