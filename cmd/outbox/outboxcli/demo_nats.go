//go:build !noembeddednats

package outboxcli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// embeddedNATS is an in-process NATS JetStream server for the demo: loopback
// only, a random port, a temporary store. It can be stopped and started again
// on the same port and store, which is the demo's broker outage.
type embeddedNATS struct {
	dir  string
	port int
	srv  *server.Server
}

func startEmbeddedNATS() (embeddedBroker, error) {
	dir, err := os.MkdirTemp("", "outbox-demo-nats-")
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	e := &embeddedNATS{dir: dir, port: server.RANDOM_PORT}
	if err := e.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	e.port = e.srv.Addr().(*net.TCPAddr).Port
	return e, nil
}

func (e *embeddedNATS) start() error {
	// A fresh Options every time: the server keeps and amends the one it is
	// given.
	srv, err := server.NewServer(&server.Options{
		ServerName:             "outbox-demo",
		Host:                   "127.0.0.1",
		Port:                   e.port,
		JetStream:              true,
		StoreDir:               e.dir,
		JetStreamMaxMemory:     64 << 20,
		JetStreamMaxStore:      1 << 30,
		NoLog:                  true,
		NoSigs:                 true,
		DisableJetStreamBanner: true,
	})
	if err != nil {
		return fmt.Errorf("embedded nats: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return errors.New("embedded nats: not ready within 10s")
	}
	e.srv = srv
	return nil
}

// URL is the client URL.
func (e *embeddedNATS) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", e.port) }

func (e *embeddedNATS) String() string {
	return fmt.Sprintf("embedded NATS JetStream at %s (store in %s)", e.URL(), e.dir)
}

// Stop shuts the server down, as an outage: clients see their connection
// drop. It is a no-op on a stopped server.
func (e *embeddedNATS) Stop() {
	if e.srv == nil {
		return
	}
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	e.srv = nil
}

// Start starts the server again on the same port and store; JetStream
// recovers its streams and consumers from the store.
func (e *embeddedNATS) Start() error { return e.start() }

// close stops the server and deletes its store.
func (e *embeddedNATS) close() {
	e.Stop()
	os.RemoveAll(e.dir)
}
