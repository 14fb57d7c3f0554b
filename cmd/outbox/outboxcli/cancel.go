package outboxcli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox/admin"
)

// cancelJSON is cancel's --json output.
type cancelJSON struct {
	Table string `json:"table"`
	admin.CancelResult
}

func cancelCommand() (*options, func(context.Context, *cli, *options) error) {
	var (
		d      dbOptions
		asJSON bool
	)
	o := newOptions("cancel", "ID... [flags]", `
Deletes events that have not been published yet (pending, waiting for a
retry, held, or dead letters), so they never leave, and releases the events a
cancelled one held back in ordered mode. An event a relay is publishing at
that moment is waited for.

A published event cannot be taken back: an id that is already published, or
unknown, is named on stderr and the command exits 6 after cancelling the
others.`)
	d.registerAdmin(o)
	o.fs.BoolVar(&asJSON, "json", false, "print JSON")
	o.flagOnly("json")
	return o, func(ctx context.Context, c *cli, o *options) error {
		if len(o.args) == 0 {
			return usageErr("cancel: give the ids of the events to cancel")
		}
		ids, err := eventIDs(o)
		if err != nil {
			return err
		}
		adm, done, err := c.adminFor(ctx, o, &d)
		if err != nil {
			return err
		}
		defer done()
		start := time.Now()
		res, err := adm.Cancel(ctx, ids...)
		if err != nil {
			return notMigrated(adm.Table(), &d, err)
		}
		if asJSON {
			if err := writeJSON(c, cancelJSON{Table: adm.Table(), CancelResult: res}); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(c.stdout, "cancelled %d event(s) in %s; released %d event(s) they held back [%s]\n",
				len(res.Cancelled), adm.Table(), res.Released, time.Since(start).Round(time.Millisecond))
		}
		var notDone []string
		if len(res.Published) > 0 {
			notDone = append(notDone, fmt.Sprintf("%d id(s) already published, not cancelled: %s", len(res.Published), joinIDs(res.Published)))
		}
		if len(res.Unknown) > 0 {
			notDone = append(notDone, fmt.Sprintf("%d id(s) unknown: %s", len(res.Unknown), joinIDs(res.Unknown)))
		}
		if len(notDone) > 0 {
			return &exitError{code: ExitNotFound, err: errors.New(strings.Join(notDone, "; "))}
		}
		return nil
	}
}

func joinIDs(ids []uuid.UUID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return strings.Join(s, " ")
}
