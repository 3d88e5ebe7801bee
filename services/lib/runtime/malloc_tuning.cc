#include "services/lib/runtime/malloc_tuning.h"

#include <unistd.h>

#include <cstdlib>
#include <string_view>

namespace trainyard::runtime {

namespace {
constexpr std::string_view kTunable = "glibc.malloc.hugetlb";
}  // namespace

std::optional<std::string> TunablesWithHugePageMalloc(const char* current) {
  std::string value = current != nullptr ? current : "";
  if (value.find(kTunable) != std::string::npos) return std::nullopt;
  if (!value.empty()) value += ':';
  value.append(kTunable).append("=1");
  return value;
}

void UseHugePageMalloc(char** argv) {
  const char* choice = std::getenv("TRAINYARD_MALLOC_HUGEPAGES");
  if (choice != nullptr && std::string_view(choice) == "0") return;
  const char* current = std::getenv("GLIBC_TUNABLES");
  const std::optional<std::string> value = TunablesWithHugePageMalloc(current);
  if (!value.has_value()) return;
  const std::optional<std::string> before =
      current != nullptr ? std::optional<std::string>(current) : std::nullopt;
  if (setenv("GLIBC_TUNABLES", value->c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Not re-executed: go on as the process is.
  if (before.has_value()) {
    setenv("GLIBC_TUNABLES", before->c_str(), 1);
  } else {
    unsetenv("GLIBC_TUNABLES");
  }
}

}  // namespace trainyard::runtime
