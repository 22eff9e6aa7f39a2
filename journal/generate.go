package journal

// The journal's statements are named queries in queries/*.sql, one file per table or
// concept; sqlc generates their Go in internal/dbsqlc from them and
// migrations/schema.sql (see sqlc.yaml). After a migration, `go generate ./migrations`
// dumps the schema again and runs this too. internal/argsgen then gives each statement's
// parameter struct an Args method, for the batches that queue several statements.
//
//go:generate go tool sqlc generate
//go:generate go run ./internal/argsgen
