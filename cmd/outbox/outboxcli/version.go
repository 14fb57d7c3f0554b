package outboxcli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// version is stamped at build time by the release recipe and the Dockerfile:
//
//	go build -ldflags "-X github.com/pgoutbox/outbox/cmd/outbox/outboxcli.version=v0.1.0" ./cmd/outbox
//
// Empty, it falls back to what the Go toolchain recorded (see Version).
var version string

// BuildInfo says which build of the command is running.
type BuildInfo struct {
	// Version is the stamped release version; else the module version `go
	// install ...@vX` recorded; else "devel" followed by the VCS revision
	// (and "-dirty" for uncommitted changes) when the build had one; else
	// "(devel)".
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Revision  string `json:"revision,omitempty"`
	Platform  string `json:"platform"`
}

// Version returns the running command's build information.
func Version() BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	return buildInfo(version, bi, ok)
}

// buildInfo derives the build information from the stamped version and what
// the toolchain recorded.
func buildInfo(stamped string, bi *debug.BuildInfo, ok bool) BuildInfo {
	b := BuildInfo{Version: stamped, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok {
		if b.Version == "" {
			b.Version = "(devel)"
		}
		return b
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(b.Revision) > 12 {
		b.Revision = b.Revision[:12]
	}
	if dirty && b.Revision != "" {
		b.Revision += "-dirty"
	}
	switch {
	case b.Version != "":
	case bi.Main.Version != "" && bi.Main.Version != "(devel)":
		b.Version = bi.Main.Version
	case b.Revision != "":
		b.Version = "devel-" + b.Revision
	default:
		b.Version = "(devel)"
	}
	return b
}

// String is the one line `outbox version` prints.
func (b BuildInfo) String() string {
	extra := []string{b.GoVersion, b.Platform}
	if b.Revision != "" && !strings.Contains(b.Version, b.Revision) {
		extra = append([]string{"commit " + b.Revision}, extra...)
	}
	return fmt.Sprintf("outbox %s (%s)", b.Version, strings.Join(extra, ", "))
}

// buildInfoGauge is outbox_build_info{version,goversion} 1, the usual way to
// join a version onto every other series of the process in PromQL.
func buildInfoGauge() prometheus.Collector {
	b := Version()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "outbox_build_info",
		Help:        "Always 1; the labels say which build of the outbox command is running.",
		ConstLabels: prometheus.Labels{"version": b.Version, "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
}

func versionCommand() (*options, func(context.Context, *cli, *options) error) {
	var asJSON bool
	o := newOptions("version", "[--json]", `
Prints the version of the outbox command: the release it was built from (or
the module version, or the source revision for a development build), the Go
version and the platform. Same as outbox --version.`)
	o.fs.BoolVar(&asJSON, "json", false, "print JSON")
	o.flagOnly("json")
	return o, func(_ context.Context, c *cli, o *options) error {
		if len(o.args) > 0 {
			return usageErr("version: unexpected argument %q", o.args[0])
		}
		if asJSON {
			return writeJSON(c, Version())
		}
		fmt.Fprintln(c.stdout, Version())
		return nil
	}
}
