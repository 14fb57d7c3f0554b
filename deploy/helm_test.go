package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The chart is rendered by the real helm command, built from the Helm Go
// module pinned in helm/go.mod (a module of its own, so that Helm and the
// Kubernetes client libraries stay out of pgoutbox's go.mod): `go tool helm`
// in that folder. .ci/run builds it before the tests, so a test does not
// spend the build's minutes within its timeout.
const (
	helmDir   = "helm"
	chartPath = "helm/pgoutbox"
)

// helm runs `go tool helm args...` in dir and returns its standard output,
// or an error carrying its standard error. Without a built helm the test is
// skipped, saying why, except under CI=true (.ci/run builds it).
func helm(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	if os.Getenv("CI") != "true" {
		helmOnce.Do(func() { helmMissing = helmBuilt() })
		if helmMissing != nil {
			t.Skipf("helm is not built (%v): build it once with `go -C deploy/helm tool helm version` (minutes; .ci/run does), then the chart tests run", helmMissing)
		}
	}
	cmd := exec.Command("go", append([]string{"tool", "helm"}, args...)...)
	cmd.Dir = dir
	// helm/ is its own module, in no workspace a go.work may define.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// helmTemplate renders the chart at chart (relative to helm/) as release
// with helm template and the extra arguments, and parses the output.
func helmTemplate(t *testing.T, chart, release string, args ...string) []*k8sObject {
	t.Helper()
	out, err := helm(t, helmDir, append([]string{"template", release, chart, "--namespace", "apps"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := parseManifests("helm template "+release, []byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) == 0 {
		t.Fatal("helm template rendered nothing")
	}
	return objs
}

// chartMeta is the part of Chart.yaml the tests read.
type chartMeta struct {
	Name       string `yaml:"name"`
	Version    string `yaml:"version"`
	AppVersion string `yaml:"appVersion"`
}

func loadChartMeta(t *testing.T) chartMeta {
	t.Helper()
	var c chartMeta
	if err := yaml.Unmarshal(readFile(t, chartPath+"/Chart.yaml"), &c); err != nil {
		t.Fatal(err)
	}
	if c.AppVersion == "" || c.Version == "" {
		t.Fatal("Chart.yaml: version and appVersion are required")
	}
	return c
}

// checkChart runs, on a rendering of the chart, every check the Kustomize
// set passes, and the chart's own.
func checkChart(t *testing.T, objs []*k8sObject, image string) {
	t.Helper()
	for _, p := range validateManifests(objs) {
		t.Error(p)
	}
	checkSecretsOut(t, objs)
	checkRunAsNonRoot(t, objs, image, "the chart's appVersion or image values")
	checkRelay(t, objs)
	checkSettings(t, objs)
	job := checkMigrateJob(t, objs)
	if hooks := job.Metadata.Annotations["helm.sh/hook"]; hooks != "pre-install,pre-upgrade" {
		t.Errorf("%s: helm.sh/hook %q, want pre-install,pre-upgrade: the relays of a release must start on a migrated table", job, hooks)
	}
	// A pre-install hook runs before the release's other objects exist.
	var j workload
	job.decode(t, &j)
	if js := yamlText(t, job); strings.Contains(js, "serviceAccountName") || strings.Contains(js, "configMapRef") {
		t.Errorf("%s: the hook Job runs before the release's ServiceAccount and ConfigMap exist; it must not use them", job)
	}

	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					ServiceAccountName           string `yaml:"serviceAccountName"`
					AutomountServiceAccountToken *bool  `yaml:"automountServiceAccountToken"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	depObj := one(t, objs, "Deployment")
	depObj.decode(t, &dep)
	sa := one(t, objs, "ServiceAccount")
	if ps := dep.Spec.Template.Spec; ps.ServiceAccountName != sa.Metadata.Name || ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Errorf("%s: want serviceAccountName %s and automountServiceAccountToken false, got %q %v", depObj, sa.Metadata.Name, ps.ServiceAccountName, ps.AutomountServiceAccountToken)
	}
	one(t, objs, "NetworkPolicy")

	// The PrometheusRule is alerts.yml's groups, unchanged.
	pr := one(t, objs, "PrometheusRule")
	var got struct {
		Spec struct {
			Groups any `yaml:"groups"`
		} `yaml:"spec"`
	}
	pr.decode(t, &got)
	var want struct {
		Groups any `yaml:"groups"`
	}
	if err := yaml.Unmarshal(readFile(t, "prometheus/alerts.yml"), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Spec.Groups, want.Groups) {
		t.Errorf("%s: spec.groups differ from prometheus/alerts.yml's groups", pr)
	}
}

func yamlText(t *testing.T, o *k8sObject) string {
	t.Helper()
	b, err := yaml.Marshal(o.Node)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// configData returns the data of the one ConfigMap of objs.
func configData(t *testing.T, objs []*k8sObject) map[string]string {
	t.Helper()
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	one(t, objs, "ConfigMap").decode(t, &cm)
	return cm.Data
}

func TestChartDefaults(t *testing.T) {
	t.Parallel()
	meta := loadChartMeta(t)
	objs := helmTemplate(t, "./pgoutbox", "pgoutbox")
	checkChart(t, objs, "pgoutbox/outbox:"+meta.AppVersion)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.Kind]++
	}
	for _, k := range []string{"ServiceAccount", "ConfigMap", "Deployment", "Service", "ServiceMonitor", "PrometheusRule", "PodDisruptionBudget", "NetworkPolicy", "Job"} {
		if kinds[k] != 1 {
			t.Errorf("helm template: %d %s, want 1", kinds[k], k)
		}
	}
	if src := configData(t, objs)["OUTBOX_SOURCE"]; src != "table" {
		t.Errorf("ConfigMap OUTBOX_SOURCE = %q, want table (the default)", src)
	}
	// With a ServiceMonitor, no scrape annotations: the relays would be
	// scraped twice.
	var d workload
	one(t, objs, "Deployment").decode(t, &d)
	if _, ok := d.Spec.Template.Metadata.Annotations["prometheus.io/scrape"]; ok {
		t.Error("Deployment: prometheus.io annotations beside the ServiceMonitor")
	}
}

func TestChartValues(t *testing.T) {
	t.Parallel()
	meta := loadChartMeta(t)
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name    string
		release string
		args    []string
		image   string
		check   func(t *testing.T, objs []*k8sObject)
	}{{
		// Another release name: other object names, the same job label.
		name: "release name", release: "orders",
		image: "pgoutbox/outbox:" + meta.AppVersion,
		check: func(t *testing.T, objs []*k8sObject) {
			if n := one(t, objs, "Deployment").Metadata.Name; n != "orders-pgoutbox-relay" {
				t.Errorf("Deployment %q, want orders-pgoutbox-relay", n)
			}
		},
	}, {
		name: "relay settings", release: "pgoutbox",
		args: []string{
			"--set", "relay.ordered=true", "--set", "relay.batchSize=500", "--set", "relay.broker=kafka://kafka:9092",
			"--set", "relay.topic=orders", "--set", "relay.source=wal", "--set", "database.schema=app",
			"--set", "image.tag=1.2.3", "--set", "relay.resources.limits.memory=1Gi",
		},
		image: "pgoutbox/outbox:1.2.3",
		check: func(t *testing.T, objs []*k8sObject) {
			data := configData(t, objs)
			for k, v := range map[string]string{"OUTBOX_ORDERED": "true", "OUTBOX_BATCH_SIZE": "500", "OUTBOX_BROKER": "kafka://kafka:9092", "OUTBOX_TOPIC": "orders", "OUTBOX_SCHEMA": "app", "OUTBOX_SOURCE": "wal"} {
				if data[k] != v {
					t.Errorf("ConfigMap %s = %q, want %q", k, data[k], v)
				}
			}
			// The migration Job creates what the WAL relays stream.
			if job := yamlText(t, one(t, objs, "Job")); !regexp.MustCompile(`- name: OUTBOX_SOURCE\s+value: "?wal"?\n`).MatchString(job) {
				t.Errorf("migration Job without OUTBOX_SOURCE=wal:\n%s", job)
			}
			if !strings.Contains(yamlText(t, one(t, objs, "Deployment")), "memory: 1Gi") {
				t.Error("Deployment: relay.resources.limits.memory not applied")
			}
			if strings.Contains(yamlText(t, one(t, objs, "Deployment")), "OUTBOX_DIRECT_URL") {
				t.Error("Deployment: OUTBOX_DIRECT_URL without database.directUrlKey")
			}
		},
	}, {
		name: "direct URL behind PgBouncer", release: "pgoutbox",
		args:  []string{"--set", "relay.source=wal", "--set", "database.directUrlKey=direct-url"},
		image: "pgoutbox/outbox:" + meta.AppVersion,
		check: func(t *testing.T, objs []*k8sObject) {
			d := yamlText(t, one(t, objs, "Deployment"))
			if !regexp.MustCompile(`- name: OUTBOX_DIRECT_URL\s+valueFrom:\s+secretKeyRef:\s+name: pgoutbox-database\s+key: direct-url\n`).MatchString(d) {
				t.Errorf("Deployment: OUTBOX_DIRECT_URL not taken from the Secret's direct-url key:\n%s", d)
			}
		},
	}, {
		name: "digest, annotations instead of ServiceMonitor, restricted egress", release: "pgoutbox",
		args: []string{
			"--set", "image.digest=" + digest, "--set", "metrics.serviceMonitor.enabled=false", "--set", "metrics.podAnnotations=true",
			"--set-json", `networkPolicy.egress=[{"ports":[{"port":5432}]},{"ports":[{"port":4222}]}]`,
			"--set-json", `networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`,
		},
		image: "pgoutbox/outbox@" + digest,
		check: func(t *testing.T, objs []*k8sObject) {
			if n := len(byKind(objs, "ServiceMonitor")); n != 0 {
				t.Errorf("%d ServiceMonitor with metrics.serviceMonitor.enabled=false", n)
			}
			np := yamlText(t, one(t, objs, "NetworkPolicy"))
			for _, s := range []string{"- Egress", "port: 5432", "port: 53", "kubernetes.io/metadata.name: monitoring"} {
				if !strings.Contains(np, s) {
					t.Errorf("NetworkPolicy lacks %q:\n%s", s, np)
				}
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs := helmTemplate(t, "./pgoutbox", tc.release, tc.args...)
			checkChart(t, objs, tc.image)
			tc.check(t, objs)
		})
	}
}

// TestChartRefuses checks that helm refuses values the relay could not run
// with, naming the value, before rendering anything.
func TestChartRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "relay.source=polling"}, "/relay/source"},
		{[]string{"--set", "image.tag=latest"}, "/image/tag"},
		{[]string{"--set", "relay.batchSize=0"}, "/relay/batchSize"},
		{[]string{"--set", "relay.ordred=true"}, "ordred"},
		{[]string{"--set", "database.existingSecret="}, "existingSecret"},
		{[]string{"--set", "relay.source=polling", "--skip-schema-validation"}, `relay.source: "polling" is not a source (want table or wal)`},
		{[]string{"--set", "image.tag=latest", "--skip-schema-validation"}, "image.tag: latest is not a version"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			out, err := helm(t, helmDir, append([]string{"template", "pgoutbox", "./pgoutbox"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("want an error naming %q, got %v (%d bytes rendered)", tc.want, err, len(out))
			}
		})
	}
}

func TestChartLint(t *testing.T) {
	t.Parallel()
	if out, err := helm(t, helmDir, "lint", "--strict", "./pgoutbox"); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
}

// TestChartAlertsAreAlertsYml keeps the chart's copy of the alerts (a chart
// can only read its own files) identical to prometheus/alerts.yml, the one
// the promtool tests check.
func TestChartAlertsAreAlertsYml(t *testing.T) {
	t.Parallel()
	if !bytes.Equal(readFile(t, chartPath+"/files/alerts.yml"), readFile(t, "prometheus/alerts.yml")) {
		t.Error("helm/pgoutbox/files/alerts.yml differs from prometheus/alerts.yml: edit prometheus/alerts.yml, then cp deploy/prometheus/alerts.yml deploy/helm/pgoutbox/files/alerts.yml")
	}
}

// TestImageTagsPinned checks that every image reference names the release
// the chart is for: the Kustomize set's images: entries and the chart's
// default tag (its appVersion) agree, and none is latest.
func TestImageTagsPinned(t *testing.T) {
	t.Parallel()
	meta := loadChartMeta(t)
	if meta.AppVersion == "latest" {
		t.Fatal("Chart.yaml: appVersion latest")
	}
	n := 0
	for _, k := range byKind(loadManifests(t), "Kustomization") {
		var kz struct {
			Images []struct {
				Name   string `yaml:"name"`
				NewTag string `yaml:"newTag"`
				Digest string `yaml:"digest"`
			} `yaml:"images"`
		}
		k.decode(t, &kz)
		for _, img := range kz.Images {
			n++
			if img.Digest == "" && img.NewTag != meta.AppVersion {
				t.Errorf("%s: image %s tag %q, want %q (the chart's appVersion, the release these manifests are for)", k, img.Name, img.NewTag, meta.AppVersion)
			}
		}
	}
	if n == 0 {
		t.Error("no images: entry in the kustomizations")
	}
}

// TestChartBrokenIsCaught renders copies of the chart with a defect each and
// checks that the checks above see it.
func TestChartBrokenIsCaught(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file, old, new, want string
	}{{
		name: "pod labels out of the selector", file: "templates/deployment.yaml",
		old: "        app.kubernetes.io/component: relay\n      annotations:", new: "        app.kubernetes.io/component: worker\n      annotations:",
		want: "does not match the pod template's labels",
	}, {
		name: "Service port renamed", file: "templates/service.yaml",
		old: "targetPort: http", new: "targetPort: metrics",
		want: `targetPort "metrics" is not a container port`,
	}, {
		name: "ConfigMap renamed", file: "templates/configmap.yaml",
		old: `name: {{ include "pgoutbox.fullname" . }}-relay`, new: `name: {{ include "pgoutbox.fullname" . }}-config`,
		want: "ConfigMap pgoutbox-relay is not in the manifests",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := copyChart(t)
			path := filepath.Join(dir, "pgoutbox", filepath.FromSlash(tc.file))
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(tc.old)) {
				t.Fatalf("%s: %q not found", tc.file, tc.old)
			}
			if err := os.WriteFile(path, bytes.Replace(b, []byte(tc.old), []byte(tc.new), 1), 0o644); err != nil {
				t.Fatal(err)
			}
			abs, err := filepath.Abs(filepath.Join(dir, "pgoutbox"))
			if err != nil {
				t.Fatal(err)
			}
			problems := strings.Join(validateManifests(helmTemplate(t, abs, "pgoutbox")), "\n")
			if !strings.Contains(problems, tc.want) {
				t.Errorf("the schema check missed the defect: want %q in\n%s", tc.want, problems)
			}
		})
	}
}

// copyChart copies the chart into a temporary folder and returns it.
func copyChart(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	err := fs.WalkDir(osDirFS, chartPath, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, strings.TrimPrefix(path, helmDir+"/"))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := fs.ReadFile(osDirFS, path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return dir
}

var (
	helmOnce    sync.Once
	helmMissing error
)

// helmBuilt reports whether helm is in the Go build cache, without building
// it: `go tool -n helm` prints the cached binary at once, offline
// (GOPROXY=off), or else starts downloading or compiling, which is left
// after a few seconds.
func helmBuilt() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "tool", "-n", "helm")
	cmd.Dir = helmDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOFLAGS=-mod=mod")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the compilers it starts go with it
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	switch {
	case ctx.Err() != nil:
		return errors.New("it would take longer than 5s to build")
	case err != nil:
		return fmt.Errorf("go tool -n helm: %v: %s", err, firstLine(string(out)))
	}
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
