#include "executor/checkpoint/checkpoint.h"
#include "executor/checkpoint/checkpoint_manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/confined_path.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/str_cat.h"
#include "spec/model_io.h"

namespace cpt::exec {

using core::str_cat;
namespace fs = std::filesystem;

namespace {

void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw core::RuntimeError(str_cat(p.string(), ": cannot open for fsync: ", std::strerror(errno)));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw core::RuntimeError(str_cat(p.string(), ": fsync failed: ", std::strerror(errno)));
}

std::int64_t step_of(const fs::path& dir) {
  const auto name = dir.filename().string();
  if (!name.starts_with("step_") || name.size() <= 5) return -1;
  try {
    std::size_t used = 0;
    const auto s = std::stoll(name.substr(5), &used);
    return used == name.size() - 5 ? s : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

std::vector<fs::path> step_dirs(const fs::path& root) {
  std::vector<fs::path> dirs;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return dirs;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (e.is_directory() && step_of(e.path()) >= 0) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end(), [](const fs::path& a, const fs::path& b) { return step_of(a) > step_of(b); });
  return dirs;
}

}  // namespace

std::string checkpoint_dir_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

std::string file_checksum(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw core::ConfigError(str_cat(path.string(), ": cannot read"));
  std::uint64_t h = core::kFnv1a64Offset;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h = core::fnv1a64(std::string_view(buf.data(), static_cast<std::size_t>(in.gcount())), h);
  }
  return core::hex64(h);
}

void write_checkpoint_dir(const fs::path& dir, const CheckpointContents& c) {
  if (fs::exists(dir)) throw core::ConfigError(str_cat(dir.string(), ": already exists"));
  const auto parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  // During training the run's own folder failing is the environment's fault (exit 3); `checkpoint
  // import` checks the user's output path first (core::create_parent_directory).
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw core::RuntimeError(str_cat(dir.string(), ": cannot create ", parent.string(), ": ", ec.message()));
  const auto tmp = parent / str_cat(".tmp-", dir.filename().string(), "-", ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    std::vector<std::string> files{"model.safetensors"};
    write_safetensors(tmp / "model.safetensors", c.weights, {{"format", "pt"}});
    if (!c.optimizer.empty()) {
      write_safetensors(tmp / "optimizer.safetensors", c.optimizer);
      files.emplace_back("optimizer.safetensors");
    }
    if (!c.rng.empty()) {
      write_safetensors(tmp / "rng.safetensors", c.rng);
      files.emplace_back("rng.safetensors");
    }
    core::write_file_atomic(tmp / "trainer_state.json", c.trainer_state.dump(2) + "\n");
    files.emplace_back("trainer_state.json");
    nlohmann::ordered_json m;
    m["format"] = kCheckpointFormat;
    m["step"] = c.step;
    m["model"] = spec::model_to_json(c.model);
    for (const auto& f : files) {
      m["files"][f] = {{"bytes", fs::file_size(tmp / f)}, {"fnv1a64", file_checksum(tmp / f)}};
    }
    core::write_file_atomic(tmp / "manifest.json", m.dump(2) + "\n");
    for (const auto& f : files) fsync_path(tmp / f, false);
    fsync_path(tmp / "manifest.json", false);
    fsync_path(tmp, true);
    fs::rename(tmp, dir);
    fsync_path(parent, true);
  } catch (...) {
    std::error_code cleanup_error;
    fs::remove_all(tmp, cleanup_error);
    throw;
  }
}

namespace {

// write_checkpoint; a file-system failure (a full disk, a path that is not a directory) escapes
// as std::filesystem::filesystem_error.
fs::path write_or_replace_checkpoint(const fs::path& root, const CheckpointContents& c) {
  const auto dir = root / checkpoint_dir_name(c.step);
  if (!fs::exists(dir)) {
    write_checkpoint_dir(dir, c);
    return dir;
  }
  // Replace: write beside, then swap, so the old one stays valid until the new one is complete.
  const auto fresh = root / str_cat(".new-", checkpoint_dir_name(c.step), "-", ::getpid());
  fs::remove_all(fresh);
  write_checkpoint_dir(fresh, c);
  const auto old = root / str_cat(".old-", checkpoint_dir_name(c.step), "-", ::getpid());
  fs::rename(dir, old);
  fs::rename(fresh, dir);
  fs::remove_all(old);
  return dir;
}

}  // namespace

fs::path write_checkpoint(const fs::path& root, const CheckpointContents& c) {
  try {
    return write_or_replace_checkpoint(root, c);
  } catch (const fs::filesystem_error& e) {
    throw core::RuntimeError(str_cat("cannot write the checkpoint of step ", c.step, " into ", root.string(), ": ",
                                     e.code().message(), " (", e.path1().string(), ")"));
  }
}

Checkpoint Checkpoint::open(const fs::path& dir) {
  const auto where = dir.string();
  if (!fs::is_directory(dir)) throw core::ConfigError(str_cat(where, ": no such checkpoint directory"));
  const auto manifest = dir / "manifest.json";
  if (!fs::exists(manifest)) {
    throw core::ConfigError(str_cat(where, ": not a complete cpt checkpoint (no manifest.json; half-written?)"));
  }
  const auto m = read_checkpoint_manifest(core::parse_json_file(manifest), dir);
  Checkpoint c;
  c.dir_ = dir;
  c.step_ = m.step;
  c.model_ = m.model;
  for (const auto& file : m.files) {
    if (!fs::is_regular_file(file.path)) throw core::ConfigError(str_cat(where, ": ", file.name, " is missing"));
    const auto bytes = fs::file_size(file.path);
    if (bytes != file.bytes) {
      throw core::ConfigError(str_cat(where, ": ", file.name, " has ", bytes, " bytes, the manifest says ", file.bytes,
                                      " (truncated or replaced)"));
    }
    if (file_checksum(file.path) != file.fnv1a64) {
      throw core::ConfigError(
          str_cat(where, ": ", file.name, " does not match its checksum in manifest.json (corrupted)"));
    }
  }
  const auto state = core::parse_json_file(dir / "trainer_state.json");
  c.trainer_state_ = state.root();
  return c;
}

std::optional<SafetensorsFile> Checkpoint::rng() const {
  if (!fs::exists(dir_ / "rng.safetensors")) return std::nullopt;
  return SafetensorsFile::open(dir_ / "rng.safetensors");
}

std::optional<Checkpoint> latest_valid_checkpoint(const fs::path& root) {
  for (const auto& dir : step_dirs(root)) {
    try {
      return Checkpoint::open(dir);
    } catch (const core::ConfigError& e) {
      core::warn("checkpoint skipped: ", e.what());
    }
  }
  return std::nullopt;
}

bool has_step_directories(const fs::path& root) {
  return !step_dirs(root).empty();
}

int recover_unfinished_checkpoints(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return 0;
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(root, ec)) entries.push_back(e.path());
  int changed = 0;
  for (const auto& path : entries) {
    const auto name = path.filename().string();
    if (name.starts_with(".old-step_")) {
      // ".old-step_00000010-1234" → "step_00000010"
      const auto step_name = name.substr(5, name.rfind('-') - 5);
      if (step_of(root / step_name) >= 0 && !fs::exists(root / step_name)) {
        fs::rename(path, root / step_name);
        core::warn("checkpoint ", (root / step_name).string(), " restored from an interrupted replacement");
        ++changed;
        continue;
      }
    } else if (!name.starts_with(".tmp-step_") && !name.starts_with(".new-step_")) {
      continue;
    }
    fs::remove_all(path, ec);
    core::warn("removed ", path.string(), ", left by a checkpoint write that did not finish");
    ++changed;
  }
  return changed;
}

void prune_checkpoints(const fs::path& root, int keep, const fs::path& protect) {
  const auto dirs = step_dirs(root);
  for (std::size_t i = static_cast<std::size_t>(std::max(keep, 0)); i < dirs.size(); ++i) {
    if (fs::equivalent(dirs[i], protect)) continue;
    std::error_code ec;
    fs::remove_all(dirs[i], ec);
  }
}

}  // namespace cpt::exec
