package outboxcli

import (
	"context"
	"log/slog"
	"time"

	"github.com/pgoutbox/outbox"
)

// brokerCheckTimeout bounds one health check of the broker.
const brokerCheckTimeout = 10 * time.Second

// watchBroker checks the broker when the relay starts, so wrong credentials
// or a missing destination are logged at once instead of when the first
// event fails (before, only /readyz said so). While the broker is
// unreachable it checks again every interval and logs once when it answers;
// after that, failed publishes report the broker's outages.
func watchBroker(ctx context.Context, log *slog.Logger, pub outbox.Publisher, interval time.Duration) {
	hc, ok := pub.(outbox.HealthChecker)
	if !ok {
		return
	}
	down := false
	for {
		cctx, cancel := context.WithTimeout(ctx, brokerCheckTimeout)
		err := hc.Health(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			if down {
				log.Info("broker reachable: the relay publishes again")
			}
			return
		}
		if !down {
			log.Warn("broker unreachable: nothing can be published until it answers; the relay reports not ready and checks again",
				"err", redactDSN(err.Error()), "every", interval)
			down = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
