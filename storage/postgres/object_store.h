#ifndef TRAINYARD_STORAGE_POSTGRES_OBJECT_STORE_H_
#define TRAINYARD_STORAGE_POSTGRES_OBJECT_STORE_H_

#include <functional>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "storage/postgres/pool.h"

namespace trainyard::storage::postgres {

// A table of administrative objects (tenants, queues, flavors …): key columns,
// a few indexed columns derived from the object, and the object itself
// serialized in `body`, guarded by a `version` column for optimistic
// concurrency.
struct ObjectKind {
  std::string table;
  std::vector<std::string> key_columns;
  std::vector<std::string> extra_columns;
  // Optional extra writes in the same transaction after an insert or update
  // (e.g. the flavors a queue's quotas name, so a flavor in use cannot be
  // deleted).
  std::function<void(pqxx::work&, const std::vector<std::string>& key,
                     const std::string& body)>
      on_write;
};

// The kinds of this schema.
const ObjectKind& TenantKind();
const ObjectKind& ProjectKind();        // key tenant, id
const ObjectKind& CohortKind();         // extra: parent
const ObjectKind& QueueKind();          // key tenant, id; extra: cohort
const ObjectKind& PriorityClassKind();  // extra: value
const ObjectKind& FlavorKind();
const ObjectKind& ClusterKind();
const ObjectKind& PoolKind();    // key cluster, id; extra: flavor
const ObjectKind& NodeKind();    // key cluster, id; extra: pool, state
const ObjectKind& BudgetKind();  // key tenant, id; extra: project

struct StoredObject {
  std::vector<std::string> key;
  std::string body;
  int64_t version = 0;
  absl::Time create_time;
  absl::Time update_time;
};

// One row of the audit log, written in the same transaction as the change it
// records.
struct AuditRecord {
  std::string principal;
  std::string method;
  std::string resource;
  std::string tenant;  // empty for platform objects
  std::string request_json;
  std::string result = "OK";
};

// Writes an audit row inside `txn`.
void InsertAudit(pqxx::work& txn, const AuditRecord& audit);

struct ListQuery {
  // column = value conditions (e.g. {"tenant", "acme"}).
  std::vector<std::pair<std::string, std::string>> equals;
  // column IN (values); an empty list selects nothing.
  std::optional<std::pair<std::string, std::vector<std::string>>> in;
  // Resume after this key (from the previous page's last object).
  std::vector<std::string> after_key;
  // Page size; one more row is read to learn whether a next page exists.
  int limit = 100;
  // ORDER BY expression; default the key columns ascending. Must end with the
  // key columns when after_key is used.
  std::string order_by;
};

struct ListPage {
  std::vector<StoredObject> objects;
  bool more = false;
};

// Typed-agnostic CRUD over ObjectKind tables. Thread-safe.
class ObjectStore {
 public:
  explicit ObjectStore(Database* db) : db_(db) {}

  // ALREADY_EXISTS if the key is taken; FAILED_PRECONDITION (constraint name
  // attached) when a referenced object is missing.
  absl::StatusOr<StoredObject> Create(
      const ObjectKind& kind, const std::vector<std::string>& key,
      const std::vector<std::optional<std::string>>& extras,
      const std::string& body, const AuditRecord* audit);

  // NOT_FOUND if absent.
  absl::StatusOr<StoredObject> Get(const ObjectKind& kind,
                                   const std::vector<std::string>& key);

  absl::StatusOr<ListPage> List(const ObjectKind& kind, const ListQuery& query);

  // Replaces the object. expected_version 0 means "any"; otherwise a mismatch
  // is ABORTED
  // ("etag mismatch"). `mutate` receives the stored body and returns the new
  // body and extras (read-modify-write inside one transaction, the row locked
  // FOR UPDATE).
  struct Mutation {
    std::string body;
    std::vector<std::optional<std::string>> extras;
  };
  absl::StatusOr<StoredObject> Update(
      const ObjectKind& kind, const std::vector<std::string>& key,
      int64_t expected_version,
      const std::function<
          absl::StatusOr<Mutation>(const StoredObject& current)>& mutate,
      const AuditRecord* audit);

  // Creates or replaces in one statement (used by inventory reports and
  // `trainyard apply`).
  absl::StatusOr<StoredObject> Upsert(
      const ObjectKind& kind, const std::vector<std::string>& key,
      const std::vector<std::optional<std::string>>& extras,
      const std::string& body, const AuditRecord* audit);

  // NOT_FOUND if absent; FAILED_PRECONDITION while other rows reference it.
  absl::Status Delete(const ObjectKind& kind,
                      const std::vector<std::string>& key,
                      const AuditRecord* audit);

  // A value that changes whenever any object of `kinds` is created, changed
  // or deleted (row count, sum of versions and newest update time of each
  // table, in one statement): lets a reader skip reloading unchanged tables.
  absl::StatusOr<std::string> Fingerprint(
      const std::vector<const ObjectKind*>& kinds);
  // The same, one value per kind (in the order of `kinds`), still in one
  // statement: a reader reloads only the tables that changed (a dispatcher's
  // heartbeat changes clusters, not the 10,000 nodes).
  absl::StatusOr<std::vector<std::string>> Fingerprints(
      const std::vector<const ObjectKind*>& kinds);

  Database* db() const { return db_; }

 private:
  Database* db_;
};

// Page tokens: an opaque encoding of the last key of a page. Decoding refuses
// (INVALID_ARGUMENT on page_token) a token that is not base64 or whose key is
// not storable text (domain::IsStorableText).
std::string EncodePageToken(const std::vector<std::string>& key);
absl::StatusOr<std::vector<std::string>> DecodePageToken(
    const std::string& token);

}  // namespace trainyard::storage::postgres

#endif  // TRAINYARD_STORAGE_POSTGRES_OBJECT_STORE_H_
