// A small command-line flag parser for the mlaps CLI: --name=value or --name value, bools as
// --name / --name=false. Unknown flags and bad values are errors (one line), never a crash.
#ifndef MLAPS_TOOLS_CLI_FLAGS_H_
#define MLAPS_TOOLS_CLI_FLAGS_H_

#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"

namespace mlaps::cli {

class Flags {
 public:
  void Define(const std::string& name, std::string* value, const std::string& help);
  void Define(const std::string& name, int* value, const std::string& help);
  void Define(const std::string& name, double* value, const std::string& help);
  void Define(const std::string& name, bool* value, const std::string& help);

  // Parses args (without the program and subcommand names). Errors: InvalidArgument naming
  // the flag: unknown, missing value, or a value of the wrong type.
  absl::Status Parse(const std::vector<std::string>& args);

  // "  --name (default): help" lines.
  std::string Help() const;

 private:
  struct Flag {
    std::string name, help, default_text;
    std::variant<std::string*, int*, double*, bool*> value;
  };
  std::vector<Flag> flags_;
};

}  // namespace mlaps::cli

#endif  // MLAPS_TOOLS_CLI_FLAGS_H_
