#include "services/api/submit_batcher.h"

#include <utility>

#include "absl/time/clock.h"
#include "services/lib/runtime/metrics.h"

namespace trainyard::api {

using storage::postgres::NewJob;
using storage::postgres::SubmitOutcome;

SubmitBatcher::SubmitBatcher(storage::postgres::JobStore* jobs, Options options,
                             std::function<void(size_t)> after_commit)
    : jobs_(jobs), options_(options), after_commit_(std::move(after_commit)) {
  for (int i = 0; i < std::max(1, options_.committers); ++i) {
    threads_.emplace_back([this] { CommitLoop(); });
  }
}

SubmitBatcher::~SubmitBatcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
}

void SubmitBatcher::SubmitAsync(NewJob job, Callback done) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      queue_.push_back(Request{std::move(job), std::move(done)});
      return;
    }
  }
  done(SubmitOutcome{
      absl::UnavailableError("server is shutting down"), {}, false});
}

SubmitOutcome SubmitBatcher::Submit(NewJob job) {
  absl::Mutex mu;
  bool finished = false;
  SubmitOutcome result;
  SubmitAsync(std::move(job), [&](SubmitOutcome outcome) {
    absl::MutexLock lock(&mu);
    result = std::move(outcome);
    finished = true;
  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&finished));
  return result;
}

void SubmitBatcher::CommitLoop() {
  static runtime::Histogram& batch_size = runtime::DefaultMetrics().GetHistogram(
      "trainyard_submit_batch_size",
      "Submits written per group-commit transaction.", {},
      {1, 2, 4, 8, 16, 32, 64, 128, 256, 512});
  static runtime::Histogram& commit_seconds =
      runtime::DefaultMetrics().GetHistogram(
          "trainyard_submit_commit_seconds",
          "Duration of one group-commit transaction.");
  while (true) {
    std::vector<Request> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping and drained
      while (!queue_.empty() &&
             static_cast<int>(batch.size()) < options_.max_batch) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    batch_size.Observe(static_cast<double>(batch.size()));
    const absl::Time commit_start = absl::Now();
    std::vector<NewJob> jobs;
    jobs.reserve(batch.size());
    for (Request& r : batch) jobs.push_back(std::move(r.job));
    absl::StatusOr<std::vector<SubmitOutcome>> outcomes =
        jobs_->SubmitMany(jobs, false);
    commit_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - commit_start));
    for (size_t i = 0; i < batch.size(); ++i) {
      if (outcomes.ok()) {
        batch[i].done(std::move((*outcomes)[i]));
      } else {
        batch[i].done(SubmitOutcome{outcomes.status(), {}, false});
      }
    }
    if (outcomes.ok() && after_commit_) after_commit_(batch.size());
  }
}

}  // namespace trainyard::api
