#include "model/model_file.h"

#include "model/binary_file.h"
#include "model/llama2c_checkpoint.h"

namespace ntp::model {

LlmcCheckpoint read_model_file(const std::string& path) {
  std::int32_t first = 0;
  {
    BinaryReader in(path);
    in.read(&first, 1, "header");
  }
  return first == kLlmcCheckpointMagic ? read_llmc_checkpoint(path) : read_llama2c_checkpoint(path);
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
