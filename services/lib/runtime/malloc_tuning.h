// glibc's malloc on transparent huge pages, for Trainyard's processes.
//
// A scheduler that becomes the leader at 100,000 jobs allocates about
// 360 MB within a few seconds (every active job, parsed, and the policy's
// picture of them). On 4 KiB pages that is about 90,000 page faults, and on
// a virtual machine each is expensive: measured, glibc's heap growth and
// the kernel's fault handling took about half of the takeover's CPU time.
// glibc (2.35 and later) backs its heap with transparent huge pages when
// the tunable `glibc.malloc.hugetlb=1` is set (madvise; the kernel's
// transparent_hugepage setting `madvise` or `always` honours it, `never`
// ignores it), and it reads tunables only when a process starts.
// docs/performance.md has the figures.
#ifndef TRAINYARD_SERVICES_LIB_RUNTIME_MALLOC_TUNING_H_
#define TRAINYARD_SERVICES_LIB_RUNTIME_MALLOC_TUNING_H_

#include <optional>
#include <string>

namespace trainyard::runtime {

// The GLIBC_TUNABLES value with the huge-page tunable added to `current`
// (the variable's value, nullptr when unset), or nullopt when `current`
// already names glibc.malloc.hugetlb (whatever value the operator chose).
std::optional<std::string> TunablesWithHugePageMalloc(const char* current);

// Unless GLIBC_TUNABLES already names glibc.malloc.hugetlb, or
// TRAINYARD_MALLOC_HUGEPAGES=0: sets the tunable and executes this program
// again with the same arguments (the same process id; the re-executed
// program finds the tunable set and goes on). Call it first thing in main().
// If the exec fails, it returns with the environment as it was and the
// process goes on with malloc's defaults. Children inherit the variable.
void UseHugePageMalloc(char** argv);

}  // namespace trainyard::runtime

#endif  // TRAINYARD_SERVICES_LIB_RUNTIME_MALLOC_TUNING_H_
