#pragma once
// The safetensors format (github.com/huggingface/safetensors), read through a memory map and
// written by us: an 8-byte little-endian header length N, N bytes of JSON
//   {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>", ...}}
// padded with spaces to a multiple of 8, then the tensor bytes; offsets are relative to the end
// of the header. cpt uses it for its own checkpoints and for Hugging Face interchange.
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "executor/io/mapped_file.h"
#include "executor/io/safetensors_header.h"

namespace cpt::exec {

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates the header (parse_safetensors_header): ConfigError naming
  // the file and what is wrong.
  static SafetensorsFile open(const std::filesystem::path& path);

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] std::vector<std::string> names() const;  // in file order
  [[nodiscard]] bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  [[nodiscard]] const SafetensorInfo& info(const std::string& name) const;  // ConfigError if absent
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A copy of tensor `name` as `dtype` on the CPU (converted when the stored dtype differs).
  [[nodiscard]] torch::Tensor load(const std::string& name, torch::ScalarType dtype) const;
  // The stored dtype, as a torch type.
  [[nodiscard]] torch::ScalarType stored_type(const std::string& name) const;

 private:
  std::filesystem::path path_;
  std::shared_ptr<const MappedFile> mapping_;
  const std::byte* data_ = nullptr;  // start of the data section inside the mapping
  std::map<std::string, SafetensorInfo> tensors_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (any CPU or device tensors; stored contiguous in their own dtype, in the given
// order) to `path`, fsynced. Not atomic by itself: callers write into a temporary directory and
// rename it (checkpoint.h). RuntimeError when the file cannot be written.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace cpt::exec
