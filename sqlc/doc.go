// Package sqlc holds no code: it is the home of queries.sql and sqlc.yaml,
// sqlc queries on pgoutbox's outbox table for applications that write their
// SQL with sqlc, and of the code sqlc generates from them (package outboxdb).
// Its tests run sqlc (a tool dependency of this folder's go.mod, a module of
// its own so that sqlc stays out of pgoutbox's) to check the generated code
// matches the queries and the migrations, and exercise that code on the real
// PostgreSQL:
//
//	cd sqlc && go test ./...
package sqlc
