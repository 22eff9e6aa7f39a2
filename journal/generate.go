package journal

// The journal's statements are named queries in queries/*.sql, one file per table or
// concept; sqlc generates their Go in internal/dbsqlc from them and
// migrations/schema.sql (see sqlc.yaml). After a migration, `go generate ./migrations`
// dumps the schema again and runs this too.
//
//go:generate go tool sqlc generate
