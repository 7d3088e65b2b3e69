#include "tools/cli/flags.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"

namespace mlaps::cli {
namespace {

absl::Status BadValue(const std::string& name, const std::string& value, const char* want) {
  return absl::InvalidArgumentError(absl::StrCat("flag --", name, "=", value, ": expected ", want));
}

}  // namespace

void Flags::Define(const std::string& name, std::string* value, const std::string& help) {
  flags_.push_back({name, help, "\"" + *value + "\"", value});
}
void Flags::Define(const std::string& name, int* value, const std::string& help) {
  flags_.push_back({name, help, std::to_string(*value), value});
}
void Flags::Define(const std::string& name, double* value, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*value), value});
}
void Flags::Define(const std::string& name, bool* value, const std::string& help) {
  flags_.push_back({name, help, *value ? "true" : "false", value});
}

absl::Status Flags::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (flags are --name=value)"));
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Flag* flag = nullptr;
    for (Flag& f : flags_) {
      if (f.name == name) flag = &f;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (bool** b = std::get_if<bool*>(&flag->value)) {
      if (!has_value || value == "true" || value == "1") {
        **b = true;
      } else if (value == "false" || value == "0") {
        **b = false;
      } else {
        return BadValue(name, value, "true or false");
      }
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
      value = args[++i];
    }
    if (std::string** s = std::get_if<std::string*>(&flag->value)) {
      **s = value;
    } else if (int** n = std::get_if<int*>(&flag->value)) {
      char* end = nullptr;
      errno = 0;
      const long v = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || errno != 0 || v < std::numeric_limits<int>::min() ||
          v > std::numeric_limits<int>::max()) {
        return BadValue(name, value, "an integer");
      }
      **n = static_cast<int>(v);
    } else if (double** d = std::get_if<double*>(&flag->value)) {
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0') return BadValue(name, value, "a number");
      **d = v;
    }
  }
  return absl::OkStatus();
}

std::string Flags::Help() const {
  std::string out;
  for (const Flag& f : flags_) {
    absl::StrAppend(&out, "  --", f.name, " (", f.default_text, "): ", f.help, "\n");
  }
  return out;
}

}  // namespace mlaps::cli
