#include "services/api/submit_batcher.h"

#include <utility>

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

SubmitOutcome SubmitBatcher::Submit(NewJob job) {
  Request request{std::move(job), {}, false};
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return SubmitOutcome{absl::UnavailableError("server is shutting down"), {}, false};
  }
  queue_.push_back(&request);
  mu_.Await(absl::Condition(&request.done));
  return std::move(request.outcome);
}

void SubmitBatcher::CommitLoop() {
  while (true) {
    std::vector<Request*> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping and drained
      while (!queue_.empty() && static_cast<int>(batch.size()) < options_.max_batch) {
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
    }
    std::vector<NewJob> jobs;
    jobs.reserve(batch.size());
    for (Request* r : batch) jobs.push_back(r->job);
    absl::StatusOr<std::vector<SubmitOutcome>> outcomes = jobs_->SubmitMany(jobs, false);
    {
      absl::MutexLock lock(&mu_);
      for (size_t i = 0; i < batch.size(); ++i) {
        if (outcomes.ok()) {
          batch[i]->outcome = std::move((*outcomes)[i]);
        } else {
          batch[i]->outcome.status = outcomes.status();
        }
        batch[i]->done = true;
      }
    }
    if (outcomes.ok() && after_commit_) after_commit_(batch.size());
  }
}

}  // namespace trainyard::api
