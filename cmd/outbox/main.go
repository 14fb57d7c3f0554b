// Command outbox is pgoutbox's relay daemon and operator's tool. Its logic
// lives in package outboxcli; see its documentation or `outbox --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pgoutbox/outbox/cmd/outbox/outboxcli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal starts a graceful drain; restoring the default
	// disposition lets a second one end the process at once.
	context.AfterFunc(ctx, stop)
	os.Exit(outboxcli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}
