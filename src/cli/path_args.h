#pragma once
// Path arguments are checked for their kind before a command runs: a folder
// given where a file is read (or written) and a file given where a folder is
// made are usage errors (exit 2) naming the flag, never a silent default.
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

namespace ntp::cli {

// An existing regular file (an input: --config, a scenario).
inline const CLI::Validator& input_file() {
  static const CLI::Validator check(
      [](std::string& path) -> std::string {
        if (!std::filesystem::exists(path)) return "'" + path + "' does not exist";
        if (std::filesystem::is_directory(path)) return "'" + path + "' is a folder, expected a file";
        return "";
      },
      "FILE");
  return check;
}

// An existing folder (an input: a run directory to read).
inline const CLI::Validator& input_folder() {
  static const CLI::Validator check(
      [](std::string& path) -> std::string {
        if (!std::filesystem::exists(path)) return "'" + path + "' does not exist";
        if (!std::filesystem::is_directory(path)) return "'" + path + "' is a file, expected a folder";
        return "";
      },
      "DIR");
  return check;
}

// A folder, or a path where one will be made (an output: --run-dir, --out).
inline const CLI::Validator& output_folder() {
  static const CLI::Validator check(
      [](std::string& path) -> std::string {
        if (std::filesystem::exists(path) && !std::filesystem::is_directory(path)) {
          return "'" + path + "' is a file, expected a folder (or a new path)";
        }
        return "";
      },
      "DIR");
  return check;
}

// A file, or a path where one will be written (an output: --json FILE).
inline const CLI::Validator& output_file() {
  static const CLI::Validator check(
      [](std::string& path) -> std::string {
        if (std::filesystem::is_directory(path)) return "'" + path + "' is a folder, expected a file";
        return "";
      },
      "FILE");
  return check;
}

}  // namespace ntp::cli
