#include "services/accounting/meter_service.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/accounting/budgets.h"
#include "services/accounting/pricing/idle.h"
#include "services/lib/runtime/logging.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::accounting {

namespace pg = storage::postgres;
using pricing::TimeMs;
using runtime::Log;
using runtime::LogLevel;

pricing::AttemptUsage UsageOf(const pg::MeterCandidate& c) {
  pricing::AttemptUsage usage;
  usage.keys = {.tenant = c.tenant,
                .project = c.project,
                .user = c.user,
                .queue = c.queue,
                .cluster = c.cluster,
                .flavor = c.flavor,
                .job = absl::StrCat("tenants/", c.tenant, "/jobs/", c.job_id),
                .attempt = c.attempt,
                .labels = c.labels};
  usage.spot = c.spot_flavor;
  usage.workers = c.workers;
  usage.gpus_per_worker = c.gpus_per_worker;
  usage.cpu_millis_per_worker = c.cpu_millis_per_worker;
  usage.memory_bytes_per_worker = c.memory_bytes_per_worker;
  usage.start_time = c.start_ms;
  usage.last_checkpoint_time = c.last_checkpoint_ms;
  if (!c.end_ms.has_value()) {
    usage.end_reason = pricing::EndReason::kRunning;
    return usage;
  }
  usage.end_time = std::max(*c.end_ms, c.start_ms);
  switch (c.failure_class) {
    case trainyard::v1::FAILURE_CLASS_USER_ERROR:
    case trainyard::v1::FAILURE_CLASS_TIME_LIMIT:
      usage.end_reason = pricing::EndReason::kUserError;
      break;
    case trainyard::v1::FAILURE_CLASS_PREEMPTION:
      usage.end_reason = pricing::EndReason::kPreemption;
      break;
    case trainyard::v1::FAILURE_CLASS_SPOT_RECLAIM:
      usage.end_reason = pricing::EndReason::kSpotReclaim;
      break;
    case trainyard::v1::FAILURE_CLASS_NODE_FAILURE:
    case trainyard::v1::FAILURE_CLASS_BACKEND_ERROR:
      usage.end_reason = pricing::EndReason::kNodeFailure;
      break;
    case trainyard::v1::FAILURE_CLASS_CANCELLED:
      usage.end_reason = pricing::EndReason::kCancelled;
      break;
    default:
      usage.end_reason = pricing::EndReason::kCompleted;
      break;
  }
  return usage;
}

absl::StatusOr<pg::MeterWrite> MeterCandidateAt(
    const pricing::PriceBook& book, const pg::MeterCandidate& c, TimeMs now,
    const pricing::MeterOptions& options) {
  const pricing::AttemptUsage usage = UsageOf(c);
  const bool ended = usage.end_time.has_value();
  const TimeMs until = ended ? *usage.end_time : std::max(now, c.start_ms);
  // From where the last pass left off; an end recorded after a pass that
  // metered past it pulls the cursor back to the end, so that the lines
  // beyond it are replaced (deleted).
  TimeMs since = c.start_ms;
  if (c.metered_until_ms.has_value()) {
    since = std::max(c.start_ms, std::min(*c.metered_until_ms, until) - 1);
  }
  absl::StatusOr<std::vector<pricing::LedgerLine>> lines =
      pricing::MeterAttemptSince(book, usage, since, until, options);
  if (!lines.ok()) return lines.status();
  return pg::MeterWrite{.lines = *std::move(lines),
                        .replace_from = since,
                        .metered_until_ms = until,
                        .final = ended};
}

pg::IdleWrite ComputeIdleWrite(
    const pricing::PriceBook& book, const pg::IdleInput& input,
    const pricing::MeterOptions& options,
    std::vector<std::pair<std::string, absl::Status>>* unpriced) {
  // The allocated lines of each (hour, flavor).
  std::map<std::pair<TimeMs, std::string>, std::vector<pricing::LedgerLine>>
      allocated;
  for (const pricing::LedgerLine& line : input.allocated) {
    allocated[{line.period_start, line.keys.flavor}].push_back(line);
  }
  const std::vector<pricing::Commitment> commitments = book.AllCommitments();
  pg::IdleWrite out;
  for (const TimeMs hour : input.hours) {
    const TimeMs end = hour + pricing::kMsPerHour;
    std::map<std::string, pricing::PoolPeriod> pools;
    auto pool = [&](const std::string& flavor) -> pricing::PoolPeriod& {
      pricing::PoolPeriod& p = pools[flavor];
      p.pool = flavor;
      p.spot = input.spot.contains(flavor);
      p.period_start = hour;
      return p;
    };
    for (const auto& [flavor, held] : input.held) {
      for (const pricing::CapacityHeld& h : held) {
        if (h.start_time < end && h.end_time > hour) {
          pool(flavor).held.push_back(h);
        }
      }
    }
    for (const pricing::Commitment& c : commitments) {
      if (c.start_time < end && c.end_time > hour) pool(c.flavor);
    }
    for (const auto& [flavor, period] : pools) {
      auto it = allocated.find({hour, flavor});
      const absl::Span<const pricing::LedgerLine> lines =
          it == allocated.end() ? absl::Span<const pricing::LedgerLine>()
                                : absl::MakeConstSpan(it->second);
      absl::StatusOr<pricing::IdleLine> idle =
          pricing::ComputeIdle(book, period, lines, options);
      if (!idle.ok()) {
        if (unpriced != nullptr) {
          unpriced->emplace_back(
              absl::StrCat(flavor, " ",
                           absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                                            absl::FromUnixMillis(hour),
                                            absl::UTCTimeZone())),
              idle.status());
        }
        continue;
      }
      for (const pricing::IdleShare& share : pricing::ShareIdle(*idle, lines)) {
        out.shares.push_back({.pool = flavor,
                              .period_start = hour,
                              .tenant = share.tenant,
                              .micros = share.micros});
      }
      out.lines.push_back(*std::move(idle));
    }
  }
  return out;
}

MeterService::MeterService(MeterServiceOptions options)
    : options_(std::move(options)) {}

MeterService::~MeterService() { Shutdown(); }

absl::StatusOr<std::unique_ptr<MeterService>> MeterService::Create(
    MeterServiceOptions options) {
  auto s = std::unique_ptr<MeterService>(new MeterService(std::move(options)));
  absl::StatusOr<std::unique_ptr<pg::Database>> db =
      pg::Database::Open({.url = s->options_.postgres_url,
                          .pool_size = std::max(2, s->options_.db_pool_size),
                          .custom_plans = true});
  if (!db.ok()) return db.status();
  s->db_ = *std::move(db);
  s->store_ = std::make_unique<pg::AccountingStore>(s->db_.get());
  return s;
}

void MeterService::Start() {
  loop_.Start(*db_,
              {.name = "meter",
               .lock_key = options_.leader_lock_key,
               .standby_poll = options_.standby_poll,
               .interval = options_.interval},
              nullptr, [this]() -> leader::NextRound {
                absl::StatusOr<PassResult> pass = RunPass(absl::Now());
                if (!pass.ok()) {
                  Log(LogLevel::kWarning, "meter: pass failed",
                      {{"error", pass.status()}});
                }
                return {};
              });
}

void MeterService::Shutdown() { loop_.Stop(); }

absl::StatusOr<MeterService::PassResult> MeterService::RunPass(absl::Time now) {
  absl::StatusOr<pricing::PriceBook> book =
      store_->LoadPriceBook(options_.currency);
  if (!book.ok()) return book.status();
  const TimeMs now_ms = absl::ToUnixMillis(now);
  PassResult result;
  int64_t after_job = -1;
  int32_t after_attempt = 0;
  // A cost event per job metered, at most every cost_event_interval while it
  // runs, and whenever an attempt is metered for the last time.
  const pg::CostEvents cost_events{
      .due =
          [&](int64_t job, bool attempt_final) {
            if (attempt_final) {
              cost_evented_.erase(job);
              return true;
            }
            auto [it, inserted] = cost_evented_.try_emplace(job, now);
            if (inserted) return true;
            if (now - it->second < options_.cost_event_interval) return false;
            it->second = now;
            return true;
          },
      .time = now};
  while (true) {
    absl::StatusOr<pg::MeterBatchResult> batch = store_->MeterBatch(
        after_job, after_attempt, options_.batch,
        [&](const pg::MeterCandidate& c) {
          return MeterCandidateAt(*book, c, now_ms, options_.meter);
        },
        &cost_events);
    if (!batch.ok()) return batch.status();
    result.attempts += batch->attempts;
    result.lines_upserted += batch->lines_upserted;
    result.lines_deleted += batch->lines_deleted;
    result.failed += static_cast<int>(batch->failed.size());
    for (const auto& [job, status] : batch->failed) {
      Log(LogLevel::kWarning, "meter: attempt not metered",
          {{"job", job}, {"error", status}});
    }
    if (batch->attempts + static_cast<int>(batch->failed.size()) <
        options_.batch) {
      break;
    }
    after_job = batch->last_job_id;
    after_attempt = batch->last_attempt;
  }
  if (absl::Status s = UpdateBudgets(*book, now_ms, result); !s.ok()) {
    return s;
  }
  if (absl::Status s = UpdateIdle(now_ms, result); !s.ok()) return s;
  passes_.fetch_add(1);
  return result;
}

absl::Status MeterService::UpdateIdle(TimeMs now, PassResult& result) {
  std::vector<std::pair<std::string, absl::Status>> unpriced;
  absl::StatusOr<pg::IdlePassResult> pass = store_->IdlePass(
      now - now % pricing::kMsPerHour, options_.idle_max_hours,
      options_.currency,
      [&](const pricing::PriceBook& book,
          const pg::IdleInput& input) -> absl::StatusOr<pg::IdleWrite> {
        unpriced.clear();
        return ComputeIdleWrite(book, input, options_.meter, &unpriced);
      });
  if (!pass.ok()) return pass.status();
  for (const auto& [pool_hour, status] : unpriced) {
    Log(LogLevel::kWarning, "meter: no idle line",
        {{"pool_hour", pool_hour}, {"error", status}});
  }
  result.idle_hours = pass->hours;
  result.idle_lines = pass->lines;
  return absl::OkStatus();
}

absl::Status MeterService::UpdateBudgets(const pricing::PriceBook& book,
                                         TimeMs now, PassResult& result) {
  absl::StatusOr<std::vector<pg::StoredBudget>> budgets = store_->LoadBudgets();
  if (!budgets.ok()) return budgets.status();
  if (budgets->empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<pg::BudgetStatusRow>> previous =
      store_->LoadBudgetStatus();
  if (!previous.ok()) return previous.status();
  absl::StatusOr<std::map<std::pair<std::string, std::string>, int64_t>> cost =
      store_->TenantCostByProject(pricing::MonthStartMs(now),
                                  pricing::NextMonthStartMs(now));
  if (!cost.ok()) return cost.status();
  absl::StatusOr<std::vector<pg::MeterCandidate>> open =
      store_->OpenBudgetedAttempts();
  if (!open.ok()) return open.status();
  BudgetPass pass = ComputeBudgetPass(*budgets, *previous, *cost, *open, book,
                                      now, options_.meter);
  for (const auto& [job, status] : pass.unpriced) {
    Log(LogLevel::kWarning, "meter: no forecast for an open attempt",
        {{"job", job}, {"error", status}});
  }
  std::vector<pg::PendingEvent> events;
  for (const BudgetNotice& notice : pass.notices) {
    events.push_back(
        {.tenant = notice.tenant, .job_id = 0, .event = NoticeEvent(notice)});
  }
  if (absl::Status s = store_->WriteBudgetStatus(pass.rows, events); !s.ok()) {
    return s;
  }
  for (const BudgetNotice& notice : pass.notices) {
    Log(LogLevel::kWarning, "budget threshold reached",
        {{"budget", notice.budget},
         {"percent", notice.threshold.percent},
         {"action", pricing::BudgetActionName(notice.threshold.action)},
         {"forecast_micros", notice.forecast_micros},
         {"spent_micros", notice.spent_micros},
         {"amount_micros", notice.amount_micros}});
    if (options_.notify) {
      options_.notify("budget.threshold_reached", NoticeJson(notice));
    }
  }
  result.budgets = static_cast<int>(pass.rows.size());
  result.notices = static_cast<int>(pass.notices.size());
  return absl::OkStatus();
}

}  // namespace trainyard::accounting
