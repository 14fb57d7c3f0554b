package admin

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/store"
)

// explainTimeout bounds the privilege check that names the GRANT an
// operation lacks: it runs after a statement failed, on an error path that
// must not hang.
const explainTimeout = 10 * time.Second

// jobOf is what the Admin operation op needs, to name the GRANT missing
// when it fails with insufficient_privilege.
func jobOf(n ident.Names, op string) store.Job {
	switch {
	case op == "retry", op == "discard":
		return store.ActionsJob(n)
	case op == "cancel":
		return store.CancelJob(n)
	case op == "cleanup":
		return store.CleanupJob(n)
	case strings.HasPrefix(op, "replay"):
		return store.ReplayJob(n)
	case strings.HasPrefix(op, "archive"):
		return store.ArchiveJob(n)
	}
	return store.ReadJob(n)
}

// explainPrivilege is err with the missing GRANT named, when err is
// insufficient_privilege and the check finds which; else err. The check
// runs on a context of its own: the call's may be what ran out.
func explainPrivilege(pool *pgxpool.Pool, n ident.Names, job store.Job, err error) error {
	if !store.IsInsufficientPrivilege(err) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), explainTimeout)
	defer cancel()
	return store.Explain(ctx, pool, n, job, err)
}
