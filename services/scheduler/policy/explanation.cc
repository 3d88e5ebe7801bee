#include "services/scheduler/policy/explanation.h"

#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "services/scheduler/policy/pricing.h"
#include "services/scheduler/policy/quota.h"

namespace trainyard::scheduler::policy::internal {
namespace {

// Appends text pieces and integers to a string: explanations are formatted
// through a buffer on the stack, string literals with copies of known size,
// so that formatting one costs about 1,000 instructions instead of 1,700
// (a string::append() call per piece) or 2,000 (StrAppend()).
class Appender {
 public:
  explicit Appender(std::string& out) : out_(out) {}
  ~Appender() { Flush(); }
  Appender(const Appender&) = delete;
  Appender& operator=(const Appender&) = delete;

  template <size_t N>
  Appender& operator<<(const char (&literal)[N]) {
    Put(literal, N - 1);
    return *this;
  }
  Appender& operator<<(absl::string_view piece) {
    Put(piece.data(), piece.size());
    return *this;
  }
  template <typename T>
  requires std::is_integral_v<T> Appender& operator<<(T value) {
    return *this << absl::AlphaNum(value).Piece();
  }

 private:
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Put(const char* data, size_t size) {
    if (ABSL_PREDICT_FALSE(size > sizeof(buffer_) - used_)) {
      Overflow(data, size);
      return;
    }
    std::memcpy(buffer_ + used_, data, size);
    used_ += size;
  }
  ABSL_ATTRIBUTE_NOINLINE void Overflow(const char* data, size_t size) {
    Flush();
    if (size > sizeof(buffer_)) {
      out_.append(data, size);
    } else {
      std::memcpy(buffer_, data, size);
      used_ = size;
    }
  }
  void Flush() {
    out_.append(buffer_, used_);
    used_ = 0;
  }

  std::string& out_;
  size_t used_ = 0;
  char buffer_[1024];
};

}  // namespace

void AppendDetails(const Snapshot& s, const PolicyConfig& config,
                   BindingLimitFn binding_limit, const PendingJob& job,
                   const std::vector<Detail>& details, std::string& out) {
  const Queue& queue = s.queues[job.queue];
  const Resources need = job.worker.AsResources() * job.workers;
  Appender text(out);
  // The job's backends: "slurm", "slurm or kubernetes".
  auto backends = [&] {
    const char* sep = "";
    for (Backend b : {Backend::kSim, Backend::kSlurm, Backend::kKubernetes}) {
      if ((job.worker.backends & BackendBit(b)) == 0) continue;
      text << sep << BackendName(b);
      sep = " or ";
    }
  };
  for (size_t i = 0; i < details.size(); ++i) {
    const Detail& d = details[i];
    const Resource resource = static_cast<Resource>(d.resource);
    if (i == 0) {
      text << PendingReasonCode(ReasonOf(d.kind)) << ": ";
    } else {
      text << "; ";
    }
    const absl::string_view flavor =
        d.kind == Detail::kNoEligibleFlavor
            ? absl::string_view()
            : absl::string_view(s.flavors[d.flavor].name);
    // Where reclaims are expected, the restart overhead the expected cost
    // (and so the flavor's place in the job's order) counted per reclaim.
    const bool reclaimed = d.kind != Detail::kNoEligibleFlavor &&
                           s.flavors[d.flavor].reclaim_rate_per_hour > 0.0;
    auto flavor_tag = [&] {
      text << "(flavor " << flavor;
      if (reclaimed) {
        text << ", restart overhead "
             << RestartOverhead(s.flavors[d.flavor], config) / 1000000
             << " s per reclaim";
      }
      text << ")";
    };
    switch (d.kind) {
      case Detail::kNoEligibleFlavor:
        text << "queue " << queue.name
             << " has no quota for a flavor allowed by spot policy "
             << SpotPolicyName(job.spot_policy);
        if (job.worker.backends != kAnyBackend) {
          text << " and offered on ";
          backends();
          text << " (the job's backend)";
        }
        break;
      case Detail::kBudget: {
        const Budget& budget = s.budgets[d.c];
        if (budget.hourly) {
          // Running: the cap less what is left (admissions of this cycle
          // included).
          text << "user " << budget.user << "'s hourly spend cap of "
               << FormatMicros(budget.hourly_cap_micros) << "/h in budget "
               << budget.name << ": "
               << FormatMicros(budget.hourly_cap_micros - d.a)
               << "/h running, this job needs " << FormatMicros(d.b) << "/h ";
        } else {
          text << "budget " << budget.name << " has " << FormatMicros(d.a)
               << " left, expected cost " << FormatMicros(d.b) << " ";
        }
        flavor_tag();
        break;
      }
      case Detail::kQuota: {
        text << "queue " << queue.name << " " << ResourceName(resource) << " "
             << d.a << "/" << d.b << ", cohort lends " << d.c << ", job needs "
             << need.Get(resource) << " ";
        flavor_tag();
        // What binds: the limit to change, or what must end first.
        const QuotaTree::Binding binding =
            binding_limit(job.queue, d.flavor, resource, need.Get(resource));
        const absl::string_view cohort =
            binding.cohort >= 0
                ? absl::string_view(s.cohorts[binding.cohort].name)
                : absl::string_view();
        switch (binding.kind) {
          case QuotaTree::Binding::kNone:
            break;
          case QuotaTree::Binding::kNoCohort:
            text << ": the queue has no cohort to borrow from";
            break;
          case QuotaTree::Binding::kQueueBorrowingLimit:
            text << ": the queue's borrowing limit (" << binding.value
                 << ") binds";
            break;
          case QuotaTree::Binding::kNominalLent:
            text << ": its nominal quota is lent to other queues";
            if (queue.reclaim_within_cohort == ReclaimWithinCohort::kNever) {
              text << " and its reclaim_within_cohort is NEVER";
            } else {
              text << " and reclaim found no victim";
            }
            break;
          case QuotaTree::Binding::kCohortBorrowingLimit:
            text << ": cohort " << cohort << "'s borrowing limit ("
                 << binding.value << ") binds";
            break;
          case QuotaTree::Binding::kTreeInUse:
            text << ": the rest of cohort tree " << cohort << " is in use";
            break;
          case QuotaTree::Binding::kWithheld:
            text << ": the rest of cohort tree " << cohort
                 << " is in use or kept by lending limits (up to "
                 << binding.withheld << ")";
            break;
        }
        break;
      }
      case Detail::kRebalancing:
        if (!d.has_resource) break;
        text << "queue " << queue.name << " " << ResourceName(resource) << " "
             << d.a << "/" << d.b << ", job needs " << need.Get(resource)
             << ", cohort lends 0 while preemption frees quota ";
        flavor_tag();
        break;
      case Detail::kHeld:
        if (!d.has_resource) break;
        text << "queue " << queue.name << " " << ResourceName(resource) << " "
             << d.a << "/" << d.b << ", job needs " << need.Get(resource)
             << ", cohort lends 0 while a job of priority " << d.c
             << " waits for its quota ";
        flavor_tag();
        break;
      case Detail::kNoFitCluster:
        text << "no single cluster holds " << job.workers
             << " workers (best holds " << d.a << ") ";
        flavor_tag();
        break;
      case Detail::kNoFitTopology:
        text << "no single "
             << (job.required_topology == TopologyLevel::kRack ? "rack"
                                                               : "block")
             << " holds " << job.workers << " workers (best holds " << d.a
             << ") ";
        flavor_tag();
        break;
      case Detail::kNoCapacity:
        text << "free nodes hold " << d.a << " of " << job.workers
             << " workers ";
        flavor_tag();
        break;
      case Detail::kReservedFor: {
        const PendingJob& reserved = s.pending[d.a & 0xFFFFFFFF];
        const int64_t gpus = d.a >> 32;
        text << "free capacity";
        if (gpus > 0) text << " (" << gpus << " GPUs)";
        text << " on flavor " << flavor << " is reserved for job "
             << reserved.id;
        if (!reserved.name.empty()) text << " (" << reserved.name << ")";
        text << ", expected to start at "
             << absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                                 absl::FromUnixMicros(d.c), absl::UTCTimeZone())
             << " when running jobs reach their time limits";
        break;
      }
      case Detail::kFairShareRefused: {
        // Shares in thousandths, rounded down, as "0.667".
        auto share = [&](int64_t billionths) {
          if (billionths == QuotaTree::kInfiniteShare) {
            text << "infinite";
            return;
          }
          const int64_t milli = billionths / 1000000;
          text << milli / 1000 << ".";
          const int64_t frac = milli % 1000;
          if (frac < 100) text << "0";
          if (frac < 10) text << "0";
          text << frac;
        };
        text << "fair-share preemption considered on flavor " << flavor
             << ": its queue's share with the job would be ";
        share(d.a);
        if (d.c < 0) {
          text << ", and no other queue of its cohort tree borrows";
        } else {
          text << ", the highest other in its cohort tree is ";
          share(d.b);
          text << " (queue " << s.queues[d.c].name
               << "): no victim would leave that queue at or above it";
        }
        break;
      }
    }
  }
  // Why it looks at some clusters only.
  if (job.worker.backends != kAnyBackend && !details.empty() &&
      details[0].kind != Detail::kNoEligibleFlavor) {
    text << "; counting ";
    backends();
    text << " nodes only (the job's backend)";
  }
  // Why it waits for spot capacity alone.
  if (job.spot_policy == SpotPolicy::kRequiredByBudget && !details.empty()) {
    text << "; spot flavors only: a budget of the job's tenant or project is "
            "past its RESTRICT_TO_SPOT threshold";
  }
}

}  // namespace trainyard::scheduler::policy::internal
