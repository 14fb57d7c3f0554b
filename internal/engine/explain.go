package engine

import (
	"context"
	"time"

	"github.com/pgoutbox/outbox/internal/dberr"
	"github.com/pgoutbox/outbox/internal/store"
)

// explainTimeout bounds the privilege look-up that names the missing
// GRANT: it runs after a statement failed, on an error path that must not
// hang.
const explainTimeout = 5 * time.Second

// explained is a batch's database error in the words the relay's start
// uses: a privilege revoked while it runs names the GRANT, a certificate
// that no longer verifies names the CA or host. Else err as it is.
func (e *Engine) explained(ctx context.Context, err error) error {
	if terr := dberr.TLS(e.pool.Config().ConnConfig, err); terr != nil {
		return terr
	}
	if !store.IsInsufficientPrivilege(err) {
		return err
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), explainTimeout)
	defer cancel()
	job := store.RelayJob(e.cfg.Names, e.cfg.WAL, e.cfg.DeleteOnPublish || e.cfg.Retention > 0)
	return store.Explain(c, e.pool, e.cfg.Names, job, err)
}
