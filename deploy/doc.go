// Package deploy holds no code: its tests keep pgoutbox's deployment files
// honest. They check that
//
//   - prometheus/alerts.yml is valid and behaves as alerts_test.yml says
//     (promtool check rules, promtool test rules), and uses only metrics the
//     relay exports;
//   - grafana/outbox.json is a valid dashboard whose every query uses only
//     metrics the relay exports and the dashboard's job/instance variables;
//   - the Kubernetes manifests parse, probe /healthz and /readyz on the port
//     the relay listens on, take the database URL from a Secret, run as
//     non-root, and set only settings the outbox command knows;
//   - the Helm chart in helm/pgoutbox, rendered by `helm template` (the helm
//     command built from the Helm module that helm/go.mod pins, a module of
//     its own), passes the same checks with several sets of values, plus a
//     schema check of every object (kinds, apiVersions, required fields,
//     selectors that select, ports and references that resolve), which the
//     Kustomize set passes too; its PrometheusRule is alerts.yml; image
//     tags are the chart's appVersion, never latest;
//   - the Dockerfile's build command produces a static binary and the build
//     context keeps every source file that command needs;
//   - the least-privilege GRANTs documented in docs/OPERATING.md are enough,
//     and no more than enough, on the real PostgreSQL; each documented role
//     (owner, application, table and WAL relay, console, operator), with
//     exactly its block and no superuser, does its job through the outbox
//     command, and a missing privilege is one line naming the GRANT;
//   - docs/OPERATING.md lists every metric and has the runbook section each
//     alert links to.
//
// Run them with `go test ./deploy/` (add -short to skip the static build).
package deploy
