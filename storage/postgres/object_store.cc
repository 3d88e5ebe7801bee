#include "storage/postgres/object_store.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/validation.h"
#include "storage/postgres/errors.h"
#include "trainyard/v1/queue.pb.h"

namespace trainyard::storage::postgres {
namespace {

std::string SelectColumns(const ObjectKind& kind) {
  return absl::StrCat(absl::StrJoin(kind.key_columns, ", "),
                      ", body, version, ", EpochMicros("create_time"), ", ",
                      EpochMicros("update_time"));
}

StoredObject RowToObject(const ObjectKind& kind, const pqxx::row& row) {
  StoredObject o;
  size_t i = 0;
  for (; i < kind.key_columns.size(); ++i)
    o.key.push_back(row[static_cast<int>(i)].c_str());
  o.body = BytesOf(row[static_cast<int>(i++)]);
  o.version = row[static_cast<int>(i++)].as<int64_t>();
  o.create_time = TimeOf(row[static_cast<int>(i++)]);
  o.update_time = TimeOf(row[static_cast<int>(i++)]);
  return o;
}

std::string KeyCondition(const ObjectKind& kind,
                         const std::vector<std::string>& key,
                         DynamicParams& params) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < kind.key_columns.size(); ++i) {
    parts.push_back(
        absl::StrCat(kind.key_columns[i], " = ", params.Add(key[i])));
  }
  return absl::StrJoin(parts, " AND ");
}

absl::Status CheckKey(const ObjectKind& kind,
                      const std::vector<std::string>& key) {
  if (key.size() != kind.key_columns.size()) {
    return absl::InternalError(absl::StrCat(kind.table, ": key has ",
                                            key.size(), " parts, expected ",
                                            kind.key_columns.size()));
  }
  return absl::OkStatus();
}

std::string ResourceNotFound(const ObjectKind& kind,
                             const std::vector<std::string>& key) {
  return absl::StrCat(kind.table, " ", absl::StrJoin(key, "/"), " not found");
}

std::vector<std::string> QueueFlavors(const std::string& body) {
  trainyard::v1::Queue queue;
  std::vector<std::string> flavors;
  if (!queue.ParseFromString(body)) return flavors;
  for (const auto& q : queue.quotas()) flavors.push_back(q.flavor());
  return flavors;
}

}  // namespace

void InsertAudit(pqxx::work& txn, const AuditRecord& audit) {
  txn.exec_params(
      "INSERT INTO audit_log (principal, method, resource, tenant, "
      "request_json, result) "
      "VALUES ($1, $2, $3, NULLIF($4, ''), $5, $6)",
      audit.principal, audit.method, audit.resource, audit.tenant,
      audit.request_json, audit.result);
}

const ObjectKind& TenantKind() {
  static const auto* kind = new ObjectKind{"tenants", {"id"}, {}, nullptr};
  return *kind;
}
const ObjectKind& ProjectKind() {
  static const auto* kind =
      new ObjectKind{"projects", {"tenant", "id"}, {}, nullptr};
  return *kind;
}
const ObjectKind& CohortKind() {
  static const auto* kind =
      new ObjectKind{"cohorts", {"id"}, {"parent"}, nullptr};
  return *kind;
}
const ObjectKind& QueueKind() {
  static const auto* kind = new ObjectKind{
      "queues",
      {"tenant", "id"},
      {"cohort"},
      [](pqxx::work& txn, const std::vector<std::string>& key,
         const std::string& body) {
        txn.exec_params(
            "DELETE FROM queue_flavors WHERE tenant = $1 AND queue = $2",
            key[0], key[1]);
        for (const std::string& flavor : QueueFlavors(body)) {
          txn.exec_params(
              "INSERT INTO queue_flavors (tenant, queue, flavor) VALUES ($1, "
              "$2, $3) "
              "ON CONFLICT DO NOTHING",
              key[0], key[1], flavor);
        }
      }};
  return *kind;
}
const ObjectKind& PriorityClassKind() {
  static const auto* kind =
      new ObjectKind{"priority_classes", {"id"}, {"value"}, nullptr};
  return *kind;
}
const ObjectKind& FlavorKind() {
  static const auto* kind = new ObjectKind{"flavors", {"id"}, {}, nullptr};
  return *kind;
}
const ObjectKind& ClusterKind() {
  static const auto* kind = new ObjectKind{"clusters", {"id"}, {}, nullptr};
  return *kind;
}
const ObjectKind& PoolKind() {
  static const auto* kind =
      new ObjectKind{"pools", {"cluster", "id"}, {"flavor"}, nullptr};
  return *kind;
}
const ObjectKind& BudgetKind() {
  static const auto* kind =
      new ObjectKind{"budgets", {"tenant", "id"}, {"project"}, nullptr};
  return *kind;
}
const ObjectKind& NodeKind() {
  static const auto* kind =
      new ObjectKind{"nodes", {"cluster", "id"}, {"pool", "state"}, nullptr};
  return *kind;
}

namespace {

// Inserts one object of `kind` (or, when `replace`, inserts it or replaces
// the one of its key, a new version) and returns it as stored; runs the kind's
// on_write and writes `audit`, if any, in the same transaction (Create and
// Upsert).
absl::StatusOr<StoredObject> WriteObject(
    Database* db, const ObjectKind& kind, const std::vector<std::string>& key,
    const std::vector<std::optional<std::string>>& extras,
    const std::string& body, const AuditRecord* audit, bool replace) {
  if (absl::Status s = CheckKey(kind, key); !s.ok()) return s;
  StoredObject out;
  absl::Status s = db->Transact([&](pqxx::work& txn) -> absl::Status {
    DynamicParams params;
    std::vector<std::string> columns = kind.key_columns;
    std::vector<std::string> values;
    for (const auto& k : key) values.push_back(params.Add(k));
    for (size_t i = 0; i < kind.extra_columns.size(); ++i) {
      columns.push_back(kind.extra_columns[i]);
      values.push_back(
          params.Add(i < extras.size() ? extras[i] : std::nullopt));
    }
    columns.push_back("body");
    values.push_back(params.AddBytes(body));
    std::string on_conflict;
    if (replace) {
      std::vector<std::string> sets;
      for (const std::string& column : kind.extra_columns) {
        sets.push_back(absl::StrCat(column, " = EXCLUDED.", column));
      }
      sets.push_back("body = EXCLUDED.body");
      sets.push_back(absl::StrCat("version = ", kind.table, ".version + 1"));
      sets.push_back("update_time = now()");
      on_conflict =
          absl::StrCat(" ON CONFLICT (", absl::StrJoin(kind.key_columns, ", "),
                       ") DO UPDATE SET ", absl::StrJoin(sets, ", "));
    }
    pqxx::result r = txn.exec_params(
        absl::StrCat("INSERT INTO ", kind.table, " (",
                     absl::StrJoin(columns, ", "), ") VALUES (",
                     absl::StrJoin(values, ", "), ")", on_conflict,
                     " RETURNING ", SelectColumns(kind)),
        params.Dynamic());
    out = RowToObject(kind, r[0]);
    if (kind.on_write) kind.on_write(txn, key, body);
    if (audit != nullptr) InsertAudit(txn, *audit);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

}  // namespace

absl::StatusOr<StoredObject> ObjectStore::Create(
    const ObjectKind& kind, const std::vector<std::string>& key,
    const std::vector<std::optional<std::string>>& extras,
    const std::string& body, const AuditRecord* audit) {
  return WriteObject(db_, kind, key, extras, body, audit, /*replace=*/false);
}

absl::StatusOr<StoredObject> ObjectStore::Get(
    const ObjectKind& kind, const std::vector<std::string>& key) {
  if (absl::Status s = CheckKey(kind, key); !s.ok()) return s;
  std::optional<StoredObject> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    DynamicParams params;
    std::string where = KeyCondition(kind, key, params);
    pqxx::result r =
        txn.exec_params(absl::StrCat("SELECT ", SelectColumns(kind), " FROM ",
                                     kind.table, " WHERE ", where),
                        params.Dynamic());
    out.reset();
    if (!r.empty()) out = RowToObject(kind, r[0]);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  if (!out) return absl::NotFoundError(ResourceNotFound(kind, key));
  return *std::move(out);
}

absl::StatusOr<std::string> ObjectStore::Fingerprint(
    const std::vector<const ObjectKind*>& kinds) {
  if (kinds.empty()) return std::string();
  std::vector<std::string> parts;
  for (const ObjectKind* kind : kinds) {
    parts.push_back(absl::StrCat(
        "SELECT count(*)::text || ':' || coalesce(sum(version), 0)::text || "
        "':' || coalesce(max(update_time)::text, '') FROM ",
        kind->table));
  }
  const std::string sql = absl::StrCat("SELECT concat_ws(' ', (",
                                       absl::StrJoin(parts, "), ("), "))");
  std::string out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out = txn.exec1(sql)[0].c_str();
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<std::string>> ObjectStore::Fingerprints(
    const std::vector<const ObjectKind*>& kinds) {
  std::vector<std::string> out;
  if (kinds.empty()) return out;
  std::vector<std::string> parts;
  for (const ObjectKind* kind : kinds) {
    parts.push_back(absl::StrCat(
        "(SELECT count(*)::text || ':' || coalesce(sum(version), 0)::text || "
        "':' || coalesce(max(update_time)::text, '') FROM ",
        kind->table, ")"));
  }
  const std::string sql = absl::StrCat("SELECT ", absl::StrJoin(parts, ", "));
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    const pqxx::row row = txn.exec1(sql);
    out.clear();
    for (const pqxx::field& f : row) out.push_back(f.c_str());
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<ListPage> ObjectStore::List(const ObjectKind& kind,
                                           const ListQuery& query) {
  ListPage page;
  if (query.in && query.in->second.empty()) return page;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    DynamicParams params;
    std::vector<std::string> where;
    for (const auto& [column, value] : query.equals) {
      where.push_back(absl::StrCat(column, " = ", params.Add(value)));
    }
    if (query.in) {
      std::vector<std::string> placeholders;
      for (const auto& v : query.in->second)
        placeholders.push_back(params.Add(v));
      where.push_back(absl::StrCat(query.in->first, " IN (",
                                   absl::StrJoin(placeholders, ", "), ")"));
    }
    if (!query.after_key.empty()) {
      if (query.after_key.size() != kind.key_columns.size()) {
        return domain::FieldError("page_token", domain::reason::kInvalidValue,
                                  "does not belong to this listing");
      }
      std::vector<std::string> placeholders;
      for (const auto& k : query.after_key)
        placeholders.push_back(params.Add(k));
      where.push_back(absl::StrCat("(", absl::StrJoin(kind.key_columns, ", "),
                                   ") > (", absl::StrJoin(placeholders, ", "),
                                   ")"));
    }
    std::string sql =
        absl::StrCat("SELECT ", SelectColumns(kind), " FROM ", kind.table);
    if (!where.empty())
      absl::StrAppend(&sql, " WHERE ", absl::StrJoin(where, " AND "));
    absl::StrAppend(&sql, " ORDER BY ",
                    query.order_by.empty()
                        ? absl::StrJoin(kind.key_columns, ", ")
                        : query.order_by,
                    " LIMIT ", query.limit + 1);
    pqxx::result r = txn.exec_params(sql, params.Dynamic());
    page.objects.clear();
    page.more = static_cast<int>(r.size()) > query.limit;
    for (int i = 0; i < static_cast<int>(r.size()) && i < query.limit; ++i) {
      page.objects.push_back(RowToObject(kind, r[i]));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return page;
}

absl::StatusOr<StoredObject> ObjectStore::Update(
    const ObjectKind& kind, const std::vector<std::string>& key,
    int64_t expected_version,
    const std::function<absl::StatusOr<Mutation>(const StoredObject& current)>&
        mutate,
    const AuditRecord* audit) {
  if (absl::Status s = CheckKey(kind, key); !s.ok()) return s;
  StoredObject out;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    DynamicParams read_params;
    std::string where = KeyCondition(kind, key, read_params);
    pqxx::result r = txn.exec_params(
        absl::StrCat("SELECT ", SelectColumns(kind), " FROM ", kind.table,
                     " WHERE ", where, " FOR UPDATE"),
        read_params.Dynamic());
    if (r.empty()) return absl::NotFoundError(ResourceNotFound(kind, key));
    StoredObject current = RowToObject(kind, r[0]);
    if (expected_version != 0 && expected_version != current.version) {
      return absl::AbortedError(absl::StrCat(
          "etag mismatch: ", kind.table, " ", absl::StrJoin(key, "/"),
          " is at version ", current.version, ", not ", expected_version));
    }
    absl::StatusOr<Mutation> mutation = mutate(current);
    if (!mutation.ok()) return mutation.status();
    DynamicParams params;
    std::vector<std::string> sets;
    for (size_t i = 0; i < kind.extra_columns.size(); ++i) {
      sets.push_back(absl::StrCat(
          kind.extra_columns[i], " = ",
          params.Add(i < mutation->extras.size() ? mutation->extras[i]
                                                 : std::nullopt)));
    }
    sets.push_back(absl::StrCat("body = ", params.AddBytes(mutation->body)));
    sets.push_back("version = version + 1");
    sets.push_back("update_time = now()");
    std::string cond = KeyCondition(kind, key, params);
    pqxx::result u = txn.exec_params(
        absl::StrCat("UPDATE ", kind.table, " SET ", absl::StrJoin(sets, ", "),
                     " WHERE ", cond, " RETURNING ", SelectColumns(kind)),
        params.Dynamic());
    out = RowToObject(kind, u[0]);
    if (kind.on_write) kind.on_write(txn, key, mutation->body);
    if (audit != nullptr) InsertAudit(txn, *audit);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<StoredObject> ObjectStore::Upsert(
    const ObjectKind& kind, const std::vector<std::string>& key,
    const std::vector<std::optional<std::string>>& extras,
    const std::string& body, const AuditRecord* audit) {
  return WriteObject(db_, kind, key, extras, body, audit, /*replace=*/true);
}

absl::Status ObjectStore::Delete(const ObjectKind& kind,
                                 const std::vector<std::string>& key,
                                 const AuditRecord* audit) {
  if (absl::Status s = CheckKey(kind, key); !s.ok()) return s;
  return db_->Transact([&](pqxx::work& txn) -> absl::Status {
    DynamicParams params;
    std::string where = KeyCondition(kind, key, params);
    pqxx::result r = txn.exec_params(
        absl::StrCat("DELETE FROM ", kind.table, " WHERE ", where),
        params.Dynamic());
    if (r.affected_rows() == 0)
      return absl::NotFoundError(ResourceNotFound(kind, key));
    if (audit != nullptr) InsertAudit(txn, *audit);
    return absl::OkStatus();
  });
}

std::string EncodePageToken(const std::vector<std::string>& key) {
  return absl::WebSafeBase64Escape(absl::StrJoin(key, "\x1f"));
}

absl::StatusOr<std::vector<std::string>> DecodePageToken(
    const std::string& token) {
  std::string raw;
  // A key is text the listing's SQL compares: bytes PostgreSQL would refuse
  // (invalid UTF-8, NUL) cannot be one of ours.
  if (!absl::WebSafeBase64Unescape(token, &raw) || raw.empty() ||
      !domain::IsStorableText(raw)) {
    return domain::FieldError("page_token", domain::reason::kInvalidValue,
                              "malformed");
  }
  return std::vector<std::string>(absl::StrSplit(raw, '\x1f'));
}

}  // namespace trainyard::storage::postgres
