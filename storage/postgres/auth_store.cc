#include "storage/postgres/auth_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/time_util.h"
#include "storage/postgres/errors.h"

namespace trainyard::storage::postgres {
namespace {

using trainyard::v1::ApiToken;
using trainyard::v1::AuditEntry;
using trainyard::v1::RoleBinding;

std::string TokenColumns() {
  return absl::StrCat("id, principal, secret_hash, description, creator, ",
                      EpochMicros("create_time"), ", ",
                      EpochMicros("expire_time"), ", ",
                      EpochMicros("revoke_time"));
}

TokenRecord RowToToken(const pqxx::row& row) {
  TokenRecord t;
  t.id = row[0].c_str();
  t.secret_hash = row[2].c_str();
  t.token.set_name(absl::StrCat("apiTokens/", t.id));
  t.token.set_principal(row[1].c_str());
  t.token.set_description(row[3].c_str());
  t.token.set_creator(row[4].c_str());
  *t.token.mutable_create_time() = ToTimestamp(TimeOf(row[5]));
  if (!row[6].is_null())
    *t.token.mutable_expire_time() = ToTimestamp(TimeOf(row[6]));
  if (!row[7].is_null())
    *t.token.mutable_revoke_time() = ToTimestamp(TimeOf(row[7]));
  return t;
}

std::string BindingColumns() {
  return absl::StrCat("id, principal, role, coalesce(tenant, ''), creator, ",
                      EpochMicros("create_time"));
}

RoleBinding RowToBinding(const pqxx::row& row) {
  RoleBinding b;
  b.set_name(absl::StrCat("roleBindings/", row[0].as<int64_t>()));
  b.set_principal(row[1].c_str());
  b.set_role(static_cast<trainyard::v1::Role>(row[2].as<int>()));
  b.set_tenant(row[3].c_str());
  b.set_creator(row[4].c_str());
  *b.mutable_create_time() = ToTimestamp(TimeOf(row[5]));
  return b;
}

}  // namespace

AuthStore::AuthStore(Database* db) : db_(db) {
  db_->Prepare(
      "token_insert",
      absl::StrCat(
          "INSERT INTO api_tokens (id, principal, secret_hash, description, "
          "creator, expire_time) VALUES ($1, $2, $3, $4, $5, "
          "CASE WHEN $6::bigint IS NULL THEN NULL ELSE "
          "to_timestamp($6::bigint / 1000000.0) END) RETURNING ",
          TokenColumns()));
  db_->Prepare("token_get", absl::StrCat("SELECT ", TokenColumns(),
                                         " FROM api_tokens WHERE id = $1"));
  db_->Prepare(
      "token_revoke",
      absl::StrCat(
          "UPDATE api_tokens SET revoke_time = coalesce(revoke_time, now()) "
          "WHERE id = $1 RETURNING ",
          TokenColumns()));
  db_->Prepare(
      "binding_insert",
      absl::StrCat(
          "INSERT INTO role_bindings (principal, role, tenant, creator) "
          "VALUES ($1, $2, NULLIF($3, ''), $4) RETURNING ",
          BindingColumns()));
  db_->Prepare("binding_get",
               absl::StrCat("SELECT ", BindingColumns(),
                            " FROM role_bindings WHERE id = $1"));
  db_->Prepare(
      "bindings_of",
      absl::StrCat("SELECT ", BindingColumns(),
                   " FROM role_bindings WHERE principal = $1 ORDER BY id"));
  db_->Prepare("binding_delete", "DELETE FROM role_bindings WHERE id = $1");
}

absl::StatusOr<ApiToken> AuthStore::CreateToken(
    const std::string& id, const std::string& principal,
    const std::string& secret_hash, const std::string& description,
    const std::string& creator, std::optional<absl::Time> expire_time,
    const AuditRecord* audit) {
  ApiToken out;
  std::optional<std::string> expire_us;
  if (expire_time) expire_us = absl::StrCat(absl::ToUnixMicros(*expire_time));
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    pqxx::result r = txn.exec_prepared(
        "token_insert", id, principal, secret_hash, description, creator,
        expire_us ? expire_us->c_str() : nullptr);
    out = RowToToken(r[0]).token;
    if (audit != nullptr) InsertAudit(txn, *audit);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<TokenRecord> AuthStore::GetToken(const std::string& id) {
  std::optional<TokenRecord> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.reset();
    pqxx::result r = txn.exec_prepared("token_get", id);
    if (!r.empty()) out = RowToToken(r[0]);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  if (!out)
    return absl::NotFoundError(absl::StrCat("apiTokens/", id, " not found"));
  return *std::move(out);
}

absl::StatusOr<std::vector<ApiToken>> AuthStore::ListTokens(
    const std::string& principal, const std::string& after_id, int limit,
    bool* more) {
  std::vector<ApiToken> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    DynamicParams params;
    std::vector<std::string> where = {"true"};
    if (!principal.empty())
      where.push_back(absl::StrCat("principal = ", params.Add(principal)));
    if (!after_id.empty())
      where.push_back(absl::StrCat("id > ", params.Add(after_id)));
    pqxx::result r = txn.exec_params(
        absl::StrCat("SELECT ", TokenColumns(), " FROM api_tokens WHERE ",
                     absl::StrJoin(where, " AND "), " ORDER BY id LIMIT ",
                     limit + 1),
        params.Dynamic());
    *more = static_cast<int>(r.size()) > limit;
    for (int i = 0; i < static_cast<int>(r.size()) && i < limit; ++i) {
      out.push_back(RowToToken(r[i]).token);
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<ApiToken> AuthStore::RevokeToken(const std::string& id,
                                                const AuditRecord* audit) {
  std::optional<ApiToken> out;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    pqxx::result r = txn.exec_prepared("token_revoke", id);
    if (r.empty())
      return absl::NotFoundError(absl::StrCat("apiTokens/", id, " not found"));
    out = RowToToken(r[0]).token;
    if (audit != nullptr) InsertAudit(txn, *audit);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return *std::move(out);
}

absl::StatusOr<RoleBinding> AuthStore::CreateRoleBinding(
    const RoleBinding& binding, const std::string& creator,
    const AuditRecord* audit) {
  RoleBinding out;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    pqxx::result r = txn.exec_prepared("binding_insert", binding.principal(),
                                       static_cast<int>(binding.role()),
                                       binding.tenant(), creator);
    out = RowToBinding(r[0]);
    if (audit != nullptr) {
      AuditRecord a = *audit;
      a.resource = out.name();
      InsertAudit(txn, a);
    }
    return absl::OkStatus();
  });
  if (s.code() == absl::StatusCode::kAlreadyExists) {
    return absl::AlreadyExistsError(absl::StrCat(
        binding.principal(), " already holds this role",
        binding.tenant().empty() ? "" : " in tenant ", binding.tenant()));
  }
  if (s.code() == absl::StatusCode::kFailedPrecondition) {
    return absl::FailedPreconditionError(
        absl::StrCat("role_binding.tenant: tenant \"", binding.tenant(),
                     "\" does not exist"));
  }
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<RoleBinding> AuthStore::GetRoleBinding(int64_t id) {
  std::optional<RoleBinding> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.reset();
    pqxx::result r = txn.exec_prepared("binding_get", id);
    if (!r.empty()) out = RowToBinding(r[0]);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  if (!out)
    return absl::NotFoundError(absl::StrCat("roleBindings/", id, " not found"));
  return *std::move(out);
}

absl::StatusOr<std::vector<RoleBinding>> AuthStore::BindingsOf(
    const std::string& principal) {
  std::vector<RoleBinding> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    for (const pqxx::row& row : txn.exec_prepared("bindings_of", principal)) {
      out.push_back(RowToBinding(row));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<RoleBinding>> AuthStore::ListRoleBindings(
    const std::string& tenant, const std::string& principal,
    const std::optional<std::vector<std::string>>& visible_tenants,
    int64_t after_id, int limit, bool* more) {
  std::vector<RoleBinding> out;
  *more = false;
  if (visible_tenants && visible_tenants->empty()) return out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    DynamicParams params;
    std::vector<std::string> where = {
        absl::StrCat("id > ", params.Add(absl::StrCat(after_id)), "::bigint")};
    if (!tenant.empty())
      where.push_back(absl::StrCat("tenant = ", params.Add(tenant)));
    if (!principal.empty())
      where.push_back(absl::StrCat("principal = ", params.Add(principal)));
    if (visible_tenants) {
      std::vector<std::string> placeholders;
      for (const auto& t : *visible_tenants)
        placeholders.push_back(params.Add(t));
      where.push_back(
          absl::StrCat("tenant IN (", absl::StrJoin(placeholders, ", "), ")"));
    }
    pqxx::result r = txn.exec_params(
        absl::StrCat("SELECT ", BindingColumns(), " FROM role_bindings WHERE ",
                     absl::StrJoin(where, " AND "), " ORDER BY id LIMIT ",
                     limit + 1),
        params.Dynamic());
    *more = static_cast<int>(r.size()) > limit;
    for (int i = 0; i < static_cast<int>(r.size()) && i < limit; ++i) {
      out.push_back(RowToBinding(r[i]));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::Status AuthStore::DeleteRoleBinding(int64_t id,
                                          const AuditRecord* audit) {
  return db_->Transact([&](pqxx::work& txn) -> absl::Status {
    pqxx::result r = txn.exec_prepared("binding_delete", id);
    if (r.affected_rows() == 0) {
      return absl::NotFoundError(
          absl::StrCat("roleBindings/", id, " not found"));
    }
    if (audit != nullptr) InsertAudit(txn, *audit);
    return absl::OkStatus();
  });
}

absl::Status AuthStore::WriteAudit(const AuditRecord& audit) {
  return db_->Transact([&](pqxx::work& txn) -> absl::Status {
    InsertAudit(txn, audit);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<AuditEntry>> AuthStore::ListAudit(
    const std::string& tenant, const std::string& principal,
    std::optional<absl::Time> start, std::optional<absl::Time> end,
    int64_t before_id, int limit, bool* more) {
  std::vector<AuditEntry> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    DynamicParams params;
    std::vector<std::string> where = {"true"};
    if (!tenant.empty())
      where.push_back(absl::StrCat("tenant = ", params.Add(tenant)));
    if (!principal.empty())
      where.push_back(absl::StrCat("principal = ", params.Add(principal)));
    if (start) {
      where.push_back(
          absl::StrCat("time >= to_timestamp(",
                       params.Add(absl::StrCat(absl::ToUnixMicros(*start))),
                       "::bigint / 1000000.0)"));
    }
    if (end) {
      where.push_back(
          absl::StrCat("time < to_timestamp(",
                       params.Add(absl::StrCat(absl::ToUnixMicros(*end))),
                       "::bigint / 1000000.0)"));
    }
    if (before_id > 0) {
      where.push_back(absl::StrCat("id < ", params.Add(absl::StrCat(before_id)),
                                   "::bigint"));
    }
    pqxx::result r =
        txn.exec_params(absl::StrCat("SELECT id, ", EpochMicros("time"),
                                     ", principal, method, resource, "
                                     "coalesce(tenant, ''), request_json, "
                                     "result FROM audit_log WHERE ",
                                     absl::StrJoin(where, " AND "),
                                     " ORDER BY id DESC LIMIT ", limit + 1),
                        params.Dynamic());
    *more = static_cast<int>(r.size()) > limit;
    for (int i = 0; i < static_cast<int>(r.size()) && i < limit; ++i) {
      AuditEntry e;
      e.set_id(r[i][0].as<int64_t>());
      *e.mutable_time() = ToTimestamp(TimeOf(r[i][1]));
      e.set_principal(r[i][2].c_str());
      e.set_method(r[i][3].c_str());
      e.set_resource(r[i][4].c_str());
      e.set_tenant(r[i][5].c_str());
      e.set_request_json(r[i][6].c_str());
      e.set_result(r[i][7].c_str());
      out.push_back(std::move(e));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

}  // namespace trainyard::storage::postgres
