#include "storage/postgres/pool.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "storage/postgres/errors.h"

namespace trainyard::storage::postgres {

Database::Database(DatabaseOptions options) : options_(std::move(options)) {}

Database::~Database() = default;

absl::StatusOr<std::unique_ptr<Database>> Database::Open(
    DatabaseOptions options) {
  if (options.url.empty()) {
    return absl::InvalidArgumentError("postgres_url: must be set");
  }
  if (options.pool_size < 1) options.pool_size = 1;
  std::unique_ptr<Database> db(new Database(std::move(options)));
  {
    absl::MutexLock lock(&db->mu_);
    for (int i = 0; i < db->options_.pool_size; ++i) {
      db->slots_.push_back(std::make_unique<Slot>());
      db->free_.push_back(db->slots_.back().get());
    }
  }
  // Fail fast on a wrong URL or an unreachable server.
  if (absl::Status s = db->Ping(); !s.ok()) return s;
  return db;
}

void Database::Prepare(const std::string& name, const std::string& sql) {
  absl::MutexLock lock(&mu_);
  for (const auto& [n, s] : statements_) {
    if (n == name) return;
  }
  statements_.emplace_back(name, sql);
}

absl::StatusOr<Database::Slot*> Database::Acquire() {
  absl::MutexLock lock(&mu_);
  auto available = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !free_.empty();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&available),
                            options_.acquire_timeout)) {
    return absl::UnavailableError("database: no free connection in the pool");
  }
  Slot* slot = free_.back();
  free_.pop_back();
  return slot;
}

void Database::Release(Slot* slot, bool broken) {
  if (broken) slot->conn.reset();
  absl::MutexLock lock(&mu_);
  free_.push_back(slot);
}

absl::Status Database::EnsureConnected(Slot& slot) {
  try {
    if (slot.conn == nullptr || !slot.conn->is_open()) {
      slot.conn = std::make_unique<pqxx::connection>(options_.url);
      slot.prepared = 0;
      if (options_.custom_plans) {
        pqxx::nontransaction setup(*slot.conn);
        setup.exec0("SET plan_cache_mode = force_custom_plan");
        setup.commit();
      }
    }
    std::vector<std::pair<std::string, std::string>> pending;
    {
      absl::MutexLock lock(&mu_);
      pending.assign(statements_.begin() + slot.prepared, statements_.end());
    }
    for (const auto& [name, sql] : pending) slot.conn->prepare(name, sql);
    slot.prepared += pending.size();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    slot.conn.reset();
    absl::Status s = StatusFromException(e);
    if (s.code() == absl::StatusCode::kInternal) {
      return absl::UnavailableError(
          absl::StrCat("database unavailable: ", e.what()));
    }
    return s;
  }
}

template <typename Txn>
absl::Status Database::Run(absl::FunctionRef<absl::Status(Txn&)> fn,
                           bool retry) {
  absl::Status last;
  const int attempts = retry ? options_.max_retries + 1 : 1;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    absl::StatusOr<Slot*> slot = Acquire();
    if (!slot.ok()) return slot.status();
    if (absl::Status s = EnsureConnected(**slot); !s.ok()) {
      Release(*slot, /*broken=*/true);
      return s;
    }
    bool broken = false;
    try {
      Txn txn(*(*slot)->conn);
      absl::Status s = fn(txn);
      if (s.ok()) {
        txn.commit();
      } else {
        txn.abort();
      }
      Release(*slot, false);
      return s;
    } catch (const std::exception& e) {
      last = StatusFromException(e);
      broken = last.code() == absl::StatusCode::kUnavailable ||
               !(*slot)->conn || !(*slot)->conn->is_open();
      Release(*slot, broken);
      if (last.code() != absl::StatusCode::kAborted) return last;
    }
  }
  return last;
}

absl::Status Database::Transact(
    absl::FunctionRef<absl::Status(pqxx::work&)> fn) {
  return Run<pqxx::work>(fn, /*retry=*/true);
}

absl::Status Database::Read(
    absl::FunctionRef<absl::Status(pqxx::read_transaction&)> fn) {
  return Run<pqxx::read_transaction>(fn, /*retry=*/true);
}

absl::Status Database::WithConnection(
    absl::FunctionRef<absl::Status(pqxx::connection&)> fn) {
  try {
    pqxx::connection conn(options_.url);
    return fn(conn);
  } catch (const std::exception& e) {
    return StatusFromException(e);
  }
}

absl::Status Database::Ping() {
  return Read([](pqxx::read_transaction& txn) {
    txn.exec("SELECT 1");
    return absl::OkStatus();
  });
}

std::string DynamicParams::Add(std::optional<std::string> value) {
  values_.push_back(std::move(value));
  return absl::StrCat("$", values_.size());
}

std::string DynamicParams::AddBytes(const std::string& bytes) {
  return absl::StrCat("decode(", Add(absl::BytesToHexString(bytes)),
                      ", 'hex')");
}

pqxx::internal::dynamic_params<std::vector<const char*>::const_iterator>
DynamicParams::Dynamic() {
  pointers_.clear();
  for (const auto& v : values_) pointers_.push_back(v ? v->c_str() : nullptr);
  return pqxx::prepare::make_dynamic_params(pointers_.cbegin(),
                                            pointers_.cend());
}

std::string BytesOf(const pqxx::field& field) {
  if (field.is_null()) return "";
  pqxx::binarystring bytes(field);
  return bytes.str();
}

pqxx::binarystring Bytea(const std::string& bytes) {
  return pqxx::binarystring(bytes.data(), bytes.size());
}

absl::Time TimeOf(const pqxx::field& field) {
  if (field.is_null()) return absl::InfinitePast();
  return absl::FromUnixMicros(field.as<int64_t>());
}

std::string EpochMicros(const std::string& column) {
  return absl::StrCat("(extract(epoch from ", column, ") * 1000000)::bigint");
}

}  // namespace trainyard::storage::postgres
