# Writes OUTPUT, a C++ source defining trainyard::storage::postgres::EmbeddedMigrations(), from
# the numbered SQL files given in MIGRATIONS (a ;-separated list), so the binary carries its
# schema. Run by storage/postgres/CMakeLists.txt at build time.
set(body "// Generated from storage/postgres/migrations/*.sql; do not edit.\n")
string(APPEND body "#include \"storage/postgres/migrate.h\"\n\n")
string(APPEND body "namespace trainyard::storage::postgres {\n\n")
string(APPEND body "const std::vector<Migration>& EmbeddedMigrations() {\n")
string(APPEND body "  static const auto* const kMigrations = new std::vector<Migration>{\n")
list(SORT MIGRATIONS)
foreach(file ${MIGRATIONS})
  get_filename_component(name ${file} NAME_WE)
  string(REGEX MATCH "^[0-9]+" number ${name})
  math(EXPR number "${number} + 0")
  file(READ ${file} sql)
  string(APPEND body "      {${number}, \"${name}\", R\"trainyard_sql(${sql})trainyard_sql\"},\n")
endforeach()
string(APPEND body "  };\n  return *kMigrations;\n}\n\n}  // namespace trainyard::storage::postgres\n")
file(WRITE ${OUTPUT}.tmp "${body}")
file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
