package outbox_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCoreImportsNoCloudSDK: an application importing outbox and outbox/nats
// (and the inbox with its NATS adapter) builds none of the cloud SDKs or the
// MQTT client; each lives in its broker's package only. The pubsub and mqtt
// packages are listed too, to show the check sees an SDK where there is one.
func TestCoreImportsNoCloudSDK(t *testing.T) {
	t.Parallel()
	forbidden := []string{"cloud.google.com/", "google.golang.org/api/", "github.com/aws/", "github.com/eclipse/paho"}
	deps := func(pkgs ...string) []string {
		t.Helper()
		out, err := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, pkgs...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %v: %v\n%s", pkgs, err, out)
		}
		return strings.Fields(string(out))
	}
	sdks := func(list []string) []string {
		var bad []string
		for _, p := range list {
			for _, f := range forbidden {
				if strings.HasPrefix(p, f) {
					bad = append(bad, p)
					break
				}
			}
		}
		return bad
	}
	const mod = "github.com/pgoutbox/outbox"
	if bad := sdks(deps(mod, mod+"/nats", mod+"/inbox", mod+"/inbox/natsinbox")); len(bad) > 0 {
		t.Errorf("outbox, outbox/nats, inbox and inbox/natsinbox build %d SDK packages, want none: %v", len(bad), bad)
	}
	for _, pkg := range []string{mod + "/pubsub", mod + "/mqtt"} {
		if len(sdks(deps(pkg))) == 0 {
			t.Errorf("%s builds no SDK package: the check above would miss one", pkg)
		}
	}
}

// TestCloudEventsSDKOnlyInTests: the CloudEvents SDK reads and validates
// the publishers' CloudEvents in the conformance suite (publishertest) and
// the tests; no package an application builds links it, the root and every
// broker package included: they map CloudEvents with outboxtype alone.
func TestCloudEventsSDKOnlyInTests(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const mod = "github.com/pgoutbox/outbox"
	seen := false
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, " ")
		sdk := strings.Contains(" "+deps, " github.com/cloudevents/")
		if pkg == mod+"/publishertest" {
			seen = sdk
			continue
		}
		if sdk {
			t.Errorf("%s links the CloudEvents SDK", pkg)
		}
	}
	if !seen {
		t.Error("publishertest does not link the CloudEvents SDK: the check above would miss one")
	}
}

// TestConsumersDoNotLinkAdmin: the operator's API lives in package admin,
// which imports the root; the root, outboxtype and the consumer side (the
// inbox and its adapters) never link it, so an application that writes,
// relays or consumes builds none of it. The outbox command is listed too,
// to show the check sees admin where it is.
func TestConsumersDoNotLinkAdmin(t *testing.T) {
	t.Parallel()
	const mod = "github.com/pgoutbox/outbox"
	linksAdmin := func(pkg string) bool {
		t.Helper()
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, p := range strings.Fields(string(out)) {
			if p == mod+"/admin" {
				return true
			}
		}
		return false
	}
	for _, pkg := range []string{mod, mod + "/outboxtype", mod + "/inbox/..."} {
		if linksAdmin(pkg) {
			t.Errorf("%s links %s/admin", pkg, mod)
		}
	}
	if !linksAdmin(mod + "/cmd/outbox") {
		t.Errorf("cmd/outbox does not link %s/admin: the check above would miss it", mod)
	}
}
