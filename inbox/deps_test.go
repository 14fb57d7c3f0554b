package inbox_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/pgoutbox/outbox"

// consumerPackages are the consumer's side: each may link, of this module,
// only the inbox, the wire format (outboxtype), the inbox's database helpers
// and, for httpinbox, the signature check; of other modules, only pgx, uuid
// and its own broker's client. The relay (the root package, its engine, the
// WAL decoder, the metrics) and the publishers stay out.
var consumerPackages = map[string]struct {
	own    []string // module packages it may link besides the common ones
	client string   // its broker client's module, "" for none
}{
	"inbox":               {},
	"inbox/natsinbox":     {client: "github.com/nats-io/"},
	"inbox/rabbitmqinbox": {client: "github.com/rabbitmq/amqp091-go"},
	"inbox/kafkainbox":    {client: "github.com/twmb/franz-go"},
	"inbox/redisinbox":    {client: "github.com/redis/go-redis"},
	"inbox/httpinbox":     {own: []string{"webhook/signature"}},
}

var (
	commonModulePackages = []string{"inbox", "outboxtype", "internal/dbtx", "internal/ident", "internal/migrate"}
	// brokerClients and heavy libraries no consumer may link but its own.
	brokerClients = []string{"github.com/nats-io/", "github.com/rabbitmq/amqp091-go", "github.com/twmb/franz-go",
		"github.com/redis/go-redis", "github.com/aws/", "github.com/prometheus/", "go.opentelemetry.io/", "github.com/jackc/pglogrepl"}
)

// natsinboxBudget is the most non-standard packages a consumer built on
// natsinbox links (ARCHITECTURE.md gives the current figure).
const natsinboxBudget = 60

// deps lists the non-standard packages pkg links.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+"/"+pkg).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	var ds []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ds = append(ds, l)
		}
	}
	return ds
}

// TestConsumersLinkNoRelay fails when a consumer package links a forbidden
// package (go list -deps), naming it.
func TestConsumersLinkNoRelay(t *testing.T) {
	t.Parallel()
	for pkg, rule := range consumerPackages {
		t.Run(strings.ReplaceAll(pkg, "/", "_"), func(t *testing.T) {
			t.Parallel()
			ds := deps(t, pkg)
			if !slices.Contains(ds, module+"/"+pkg) {
				t.Fatalf("go list -deps %s does not list the package itself: %q", pkg, ds)
			}
			allowed := slices.Concat(commonModulePackages, rule.own)
			if !slices.Contains(allowed, pkg) {
				allowed = append(allowed, pkg)
			}
			var forbidden []string
			for _, d := range ds {
				if rel, ok := strings.CutPrefix(d, module+"/"); ok || d == module {
					if !slices.Contains(allowed, rel) {
						forbidden = append(forbidden, d)
					}
					continue
				}
				for _, c := range brokerClients {
					if strings.HasPrefix(d, c) && c != rule.client {
						forbidden = append(forbidden, d)
					}
				}
			}
			if len(forbidden) > 0 {
				t.Errorf("%s links %d forbidden packages (a consumer may link, of this module, only %s, and no broker client but its own):\n%s",
					pkg, len(forbidden), strings.Join(allowed, ", "), strings.Join(forbidden, "\n"))
			}
			if pkg == "inbox/natsinbox" && len(ds) > natsinboxBudget {
				t.Errorf("natsinbox links %d non-standard packages, more than its budget of %d:\n%s", len(ds), natsinboxBudget, strings.Join(ds, "\n"))
			}
		})
	}
}
