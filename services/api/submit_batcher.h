#ifndef TRAINYARD_SERVICES_API_SUBMIT_BATCHER_H_
#define TRAINYARD_SERVICES_API_SUBMIT_BATCHER_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/postgres/job_store.h"

namespace trainyard::api {

// Group commit for Submit: concurrent submissions queue here and `committers`
// threads write them in batches of up to `max_batch`, one transaction (and one
// fsync) per batch. A caller returns only after its job is durable.
class SubmitBatcher {
 public:
  struct Options {
    int max_batch = 256;
    int committers = 2;
  };
  // `after_commit` runs after each successful batch (e.g. to wake the
  // scheduler).
  SubmitBatcher(
      storage::postgres::JobStore* jobs, Options options,
      std::function<void(size_t jobs_committed)> after_commit = nullptr);
  ~SubmitBatcher();

  SubmitBatcher(const SubmitBatcher&) = delete;
  SubmitBatcher& operator=(const SubmitBatcher&) = delete;

  using Callback = std::function<void(storage::postgres::SubmitOutcome)>;

  // Queues the job; `done` runs once it is committed (or its batch failed), on
  // a committer thread, so it must not block. After shutdown began it runs at
  // once with UNAVAILABLE.
  void SubmitAsync(storage::postgres::NewJob job, Callback done);

  // Blocks until the job is committed (or the batch failed).
  storage::postgres::SubmitOutcome Submit(storage::postgres::NewJob job);

 private:
  struct Request {
    storage::postgres::NewJob job;
    Callback done;
  };
  void CommitLoop();

  storage::postgres::JobStore* jobs_;
  const Options options_;
  std::function<void(size_t)> after_commit_;
  absl::Mutex mu_;
  std::deque<Request> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace trainyard::api

#endif  // TRAINYARD_SERVICES_API_SUBMIT_BATCHER_H_
