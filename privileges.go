package outbox

import (
	"context"
	"time"

	"github.com/pgoutbox/outbox/internal/store"
)

// ErrPrivilege is matched by the error of a role that lacks a privilege
// its job needs (SQLSTATE 42501, or the relay's check at start): a
// *PrivilegeError, whose text names the GRANT the table's owner runs to
// fix it. docs/OPERATING.md's "Database roles" lists each role's GRANTs.
var ErrPrivilege = store.ErrPrivilege

// PrivilegeError is a missing privilege: the role, the schema or table,
// the privilege and the GRANT that gives it. Its text reads
// `permission denied for table "app"."outbox_events": GRANT UPDATE ON
// "app"."outbox_events" TO "outbox_relay" (docs/OPERATING.md#database-roles)`.
type PrivilegeError = store.PrivilegeError

// privilegeCheckTimeout bounds the relay's privilege check at start.
const privilegeCheckTimeout = 10 * time.Second

// privilegeJob is what this relay needs on its table.
func (r *Relay) privilegeJob() store.Job {
	return store.RelayJob(r.names, r.cfg.WAL, r.cfg.DeleteOnPublish || r.cfg.Retention > 0)
}

// checkPrivileges is the relay's preflight: a role that lacks a GRANT of
// docs/OPERATING.md stops the relay at start with the GRANT, rather than
// failing every batch (or only the first cleanup, hours later).
func (r *Relay) checkPrivileges(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, privilegeCheckTimeout)
	defer cancel()
	return store.Check(ctx, r.pool, r.names, r.privilegeJob())
}
