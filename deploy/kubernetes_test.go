package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pgoutbox/outbox/cmd/outbox/outboxcli"
)

const k8sDir = "kubernetes"

// k8sObject is one YAML document of the manifests.
type k8sObject struct {
	File       string
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Node *yaml.Node // the whole document
}

func (o *k8sObject) String() string { return fmt.Sprintf("%s %s/%s", o.File, o.Kind, o.Metadata.Name) }

// decode decodes the whole document into v, rejecting unknown fields.
func (o *k8sObject) decode(t *testing.T, v any) {
	t.Helper()
	b, err := yaml.Marshal(o.Node)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", o, err)
	}
}

// wantAPIVersion is the apiVersion of every kind the manifests may hold.
var wantAPIVersion = map[string]string{
	"Kustomization":       "kustomize.config.k8s.io/v1beta1",
	"ConfigMap":           "v1",
	"Service":             "v1",
	"Deployment":          "apps/v1",
	"Job":                 "batch/v1",
	"PodDisruptionBudget": "policy/v1",
	"ServiceMonitor":      "monitoring.coreos.com/v1",
	"ServiceAccount":      "v1",
	"NetworkPolicy":       "networking.k8s.io/v1",
	"PrometheusRule":      "monitoring.coreos.com/v1",
}

// loadManifests parses every YAML file under kubernetes/, every document of
// each.
func loadManifests(t *testing.T) []*k8sObject {
	t.Helper()
	var objs []*k8sObject
	err := filepath.WalkDir(k8sDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := filepath.Ext(path); ext != ".yaml" && ext != ".yml" {
			return fmt.Errorf("%s: not a YAML file; the manifests hold nothing else", path)
		}
		docs, err := parseManifests(filepath.ToSlash(path), readFile(t, path))
		objs = append(objs, docs...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// parseManifests parses every YAML document of b, named after file; empty
// documents (a template that rendered nothing) are dropped.
func parseManifests(file string, b []byte) ([]*k8sObject, error) {
	var objs []*k8sObject
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for i := 0; ; i++ {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
			continue
		}
		o := &k8sObject{File: file, Node: &doc}
		if err := doc.Decode(o); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		objs = append(objs, o)
	}
	return objs, nil
}

func byKind(objs []*k8sObject, kind string) []*k8sObject {
	var out []*k8sObject
	for _, o := range objs {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

func one(t *testing.T, objs []*k8sObject, kind string) *k8sObject {
	t.Helper()
	os := byKind(objs, kind)
	if len(os) != 1 {
		t.Fatalf("want one %s in %s/, got %d", kind, k8sDir, len(os))
	}
	return os[0]
}

type envVar struct {
	Name      string  `yaml:"name"`
	Value     *string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
		ConfigMapKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"configMapKeyRef"`
		ResourceFieldRef map[string]any `yaml:"resourceFieldRef"`
		FieldRef         map[string]any `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type securityContext struct {
	RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
	RunAsUser                *int64 `yaml:"runAsUser"`
	ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
	AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
	Privileged               *bool  `yaml:"privileged"`
	Capabilities             struct {
		Drop []string `yaml:"drop"`
		Add  []string `yaml:"add"`
	} `yaml:"capabilities"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []envVar `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe   *probe                                       `yaml:"livenessProbe"`
	ReadinessProbe  *probe                                       `yaml:"readinessProbe"`
	Resources       struct{ Requests, Limits map[string]string } `yaml:"resources"`
	SecurityContext securityContext                              `yaml:"securityContext"`
}

type podTemplate struct {
	Metadata struct {
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec struct {
		TerminationGracePeriodSeconds *int64          `yaml:"terminationGracePeriodSeconds"`
		RestartPolicy                 string          `yaml:"restartPolicy"`
		SecurityContext               securityContext `yaml:"securityContext"`
		Containers                    []container     `yaml:"containers"`
		InitContainers                []container     `yaml:"initContainers"`
	} `yaml:"spec"`
}

type workload struct {
	Spec struct {
		Replicas *int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template podTemplate `yaml:"template"`
	} `yaml:"spec"`
}

// port resolves a probe's or a Service's port (a number or a container port
// name) to a number.
func (c container) port(p any) int {
	switch v := p.(type) {
	case int:
		return v
	case string:
		for _, cp := range c.Ports {
			if cp.Name == v {
				return cp.ContainerPort
			}
		}
		n, _ := strconv.Atoi(v)
		return n
	}
	return 0
}

// environment returns the container's environment as the process sees it,
// with secrets replaced by fake values: a DSN that no server answers.
func (c container) environment(t *testing.T, objs []*k8sObject) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			t.Errorf("container %s: envFrom other than a ConfigMap", c.Name)
			continue
		}
		found := false
		for _, cm := range byKind(objs, "ConfigMap") {
			if cm.Metadata.Name != ef.ConfigMapRef.Name {
				continue
			}
			found = true
			var v struct {
				Data map[string]string `yaml:"data"`
			}
			cm.decode(t, &v)
			for k, val := range v.Data {
				env[k] = val
			}
		}
		if !found {
			t.Errorf("container %s: ConfigMap %s is not in the manifests", c.Name, ef.ConfigMapRef.Name)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.Value != nil:
			env[e.Name] = *e.Value
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "postgres://fake@127.0.0.1:1/app?connect_timeout=2"
		default:
			env[e.Name] = "unresolved"
		}
	}
	return env
}

func TestManifestsParse(t *testing.T) {
	t.Parallel()
	objs := loadManifests(t)
	if len(objs) == 0 {
		t.Fatal("no manifest")
	}
	referenced := map[string]bool{}
	for _, o := range objs {
		want, ok := wantAPIVersion[o.Kind]
		switch {
		case !ok:
			t.Errorf("%s: unexpected kind %q", o, o.Kind)
		case o.APIVersion != want:
			t.Errorf("%s: apiVersion %q, want %q", o, o.APIVersion, want)
		}
		if o.Kind == "Kustomization" {
			var k struct {
				Resources []string `yaml:"resources"`
			}
			o.decode(t, &k)
			for _, r := range k.Resources {
				p := filepath.ToSlash(filepath.Join(filepath.Dir(o.File), r))
				if _, err := fs.Stat(osDirFS, p); err != nil {
					t.Errorf("%s: resource %s: %v", o, r, err)
				}
				referenced[p] = true
			}
			continue
		}
		if o.Metadata.Name == "" || o.Metadata.Labels["app.kubernetes.io/name"] != "pgoutbox" {
			t.Errorf("%s: want a name and the label app.kubernetes.io/name: pgoutbox", o)
		}
	}
	for _, o := range objs {
		if o.Kind != "Kustomization" && !referenced[o.File] {
			t.Errorf("%s: no kustomization.yaml lists %s", o, o.File)
		}
	}
}

var (
	urlWithPassword = regexp.MustCompile(`(?i)[a-z][a-z0-9+.-]*://[^/@\s]*:[^/@\s]+@`)
	secretKey       = regexp.MustCompile(`(?i)((^|_)(pass|passwd|password|secret|token|dsn|credentials?)|^database_url)$`)
)

// literalSecrets lists the secrets written in a manifest document: URLs with
// a password, values of password-like keys or environment variables. Comments
// are not values: only parsed scalars are searched.
func literalSecrets(doc *yaml.Node) []string {
	var found []string
	var walk func(n *yaml.Node, key string)
	walk = func(n *yaml.Node, key string) {
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, key)
			}
		case yaml.MappingNode:
			var name, value *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				switch k.Value {
				case "name":
					name = v
				case "value":
					value = v
				}
				walk(v, k.Value)
			}
			// An env entry: {name: X, value: literal}.
			if name != nil && value != nil && secretKey.MatchString(name.Value) && value.Value != "" {
				found = append(found, fmt.Sprintf("line %d: %s has a literal value", value.Line, name.Value))
			}
		case yaml.ScalarNode:
			if urlWithPassword.MatchString(n.Value) {
				found = append(found, fmt.Sprintf("line %d: a URL with a password", n.Line))
			}
			if secretKey.MatchString(key) && n.Value != "" {
				found = append(found, fmt.Sprintf("line %d: %s has a literal value", n.Line, key))
			}
		}
	}
	walk(doc, "")
	return found
}

func TestLiteralSecrets(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]int{
		"env:\n- name: DATABASE_URL\n  value: postgres://app@db/app\n":                       1,
		"data:\n  OUTBOX_BROKER: nats://relay:hunter2@nats:4222\n":                           1,
		"stringData:\n  password: hunter2\n  DB_PASSWORD: x\n":                               2,
		"env:\n- name: DATABASE_URL\n  valueFrom:\n    secretKeyRef: {name: db, key: url}\n": 0,
		"# postgres://user:secret@db/app\nautomountServiceAccountToken: false\n":             0,
	} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
			t.Fatal(err)
		}
		if got := literalSecrets(&n); len(got) != want {
			t.Errorf("literalSecrets(%q) = %q, want %d finding(s)", doc, got, want)
		}
	}
}

func TestManifestsKeepSecretsOut(t *testing.T) {
	t.Parallel()
	checkSecretsOut(t, loadManifests(t))
}

// checkSecretsOut fails on a Secret or a literal secret in objs.
func checkSecretsOut(t *testing.T, objs []*k8sObject) {
	t.Helper()
	for _, o := range objs {
		if o.Kind == "Secret" {
			t.Errorf("%s: a Secret in the repository; create it in the cluster (docs/OPERATING.md)", o)
		}
		for _, f := range literalSecrets(o.Node) {
			t.Errorf("%s %s", o, f)
		}
	}
}

// workloads returns o's pod-owning spec, if it is a Deployment or a Job.
func workloads(t *testing.T, o *k8sObject) []workload {
	t.Helper()
	if o.Kind != "Deployment" && o.Kind != "Job" {
		return nil
	}
	var w workload
	o.decode(t, &w)
	return []workload{w}
}

func TestManifestsRunAsNonRoot(t *testing.T) {
	t.Parallel()
	checkRunAsNonRoot(t, loadManifests(t), "pgoutbox/outbox", "the name kustomization.yaml's images: rewrites")
}

// checkRunAsNonRoot checks the security settings and resources of every
// container of objs, and that each runs image (why: the reason image is
// expected).
func checkRunAsNonRoot(t *testing.T, objs []*k8sObject, image, why string) {
	t.Helper()
	n := 0
	for _, o := range objs {
		for _, w := range workloads(t, o) {
			ps := w.Spec.Template.Spec
			for _, c := range append(slices.Clone(ps.Containers), ps.InitContainers...) {
				n++
				sc, pod := c.SecurityContext, ps.SecurityContext
				nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (sc.RunAsNonRoot == nil && pod.RunAsNonRoot != nil && *pod.RunAsNonRoot)
				if !nonRoot {
					t.Errorf("%s: container %s: runAsNonRoot is not true", o, c.Name)
				}
				uid := pod.RunAsUser
				if sc.RunAsUser != nil {
					uid = sc.RunAsUser
				}
				if uid == nil || *uid == 0 {
					t.Errorf("%s: container %s: want a non-zero runAsUser (the image's nonroot user is 65532)", o, c.Name)
				}
				if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("%s: container %s: readOnlyRootFilesystem is not true", o, c.Name)
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Errorf("%s: container %s: allowPrivilegeEscalation is not false", o, c.Name)
				}
				if sc.Privileged != nil && *sc.Privileged {
					t.Errorf("%s: container %s: privileged", o, c.Name)
				}
				if !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
					t.Errorf("%s: container %s: capabilities drop %v add %v, want drop [ALL] and nothing added", o, c.Name, sc.Capabilities.Drop, sc.Capabilities.Add)
				}
				for _, r := range []string{"cpu", "memory"} {
					if c.Resources.Requests[r] == "" || c.Resources.Limits[r] == "" {
						t.Errorf("%s: container %s: want a %s request and limit", o, c.Name, r)
					}
				}
				if c.Image != image {
					t.Errorf("%s: container %s: image %q, want %s (%s)", o, c.Name, c.Image, image, why)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no container")
	}
}

func TestRelayDeployment(t *testing.T) {
	t.Parallel()
	objs := loadManifests(t)
	checkRelay(t, objs)
	// The Kustomize set serves both discovery mechanisms (its comments say
	// to keep one).
	var d workload
	one(t, objs, "Deployment").decode(t, &d)
	if ann := d.Spec.Template.Metadata.Annotations; ann["prometheus.io/scrape"] != "true" {
		t.Errorf("deployment.yaml: no prometheus.io annotations")
	}
}

// checkRelay checks the relay's Deployment and the objects around it: the
// probes, the metrics Service, ServiceMonitor and PodDisruptionBudget.
func checkRelay(t *testing.T, objs []*k8sObject) {
	t.Helper()
	dep := one(t, objs, "Deployment")
	var d workload
	dep.decode(t, &d)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("%s: replicas %v, want 3", dep, d.Spec.Replicas)
	}
	podLabels := d.Spec.Template.Metadata.Labels
	if !subset(d.Spec.Selector.MatchLabels, podLabels) || len(d.Spec.Selector.MatchLabels) == 0 {
		t.Errorf("%s: selector %v does not select the pod labels %v", dep, d.Spec.Selector.MatchLabels, podLabels)
	}
	ps := d.Spec.Template.Spec
	if len(ps.Containers) != 1 {
		t.Fatalf("%s: want one container, got %d", dep, len(ps.Containers))
	}
	c := ps.Containers[0]
	if len(c.Command) > 0 || len(c.Args) == 0 || c.Args[0] != "relay" {
		t.Errorf("%s: command %q args %q, want the image's entrypoint with args [relay ...]", dep, c.Command, c.Args)
	}
	env := c.environment(t, objs)

	// The relay listens where the probes, the Service and the scrape
	// annotations look.
	_, portStr, err := net.SplitHostPort(env["OUTBOX_HTTP_ADDR"])
	if err != nil {
		t.Fatalf("%s: OUTBOX_HTTP_ADDR %q: %v", dep, env["OUTBOX_HTTP_ADDR"], err)
	}
	host, _, _ := net.SplitHostPort(env["OUTBOX_HTTP_ADDR"])
	if host != "0.0.0.0" && host != "" && host != "::" {
		t.Errorf("%s: OUTBOX_HTTP_ADDR %q: the kubelet and Prometheus reach the pod by its IP; listen on all interfaces", dep, env["OUTBOX_HTTP_ADDR"])
	}
	port, _ := strconv.Atoi(portStr)
	for _, p := range []struct {
		name, path string
		probe      *probe
	}{{"livenessProbe", "/healthz", c.LivenessProbe}, {"readinessProbe", "/readyz", c.ReadinessProbe}} {
		switch {
		case p.probe == nil || p.probe.HTTPGet == nil:
			t.Errorf("%s: no HTTP %s", dep, p.name)
		case p.probe.HTTPGet.Path != p.path:
			t.Errorf("%s: %s path %q, want %s", dep, p.name, p.probe.HTTPGet.Path, p.path)
		case c.port(p.probe.HTTPGet.Port) != port:
			t.Errorf("%s: %s port %v is not the relay's port %d (OUTBOX_HTTP_ADDR)", dep, p.name, p.probe.HTTPGet.Port, port)
		}
	}
	if c.port("http") != port {
		t.Errorf("%s: container port http is %d, the relay listens on %d", dep, c.port("http"), port)
	}
	ann := d.Spec.Template.Metadata.Annotations
	annotated := ann["prometheus.io/scrape"] != ""
	if annotated && (ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != portStr || ann["prometheus.io/path"] != "/metrics") {
		t.Errorf("%s: prometheus.io annotations %v, want scrape true, port %s, path /metrics", dep, ann, portStr)
	}
	if !annotated && len(byKind(objs, "ServiceMonitor")) == 0 {
		t.Errorf("%s: neither prometheus.io annotations nor a ServiceMonitor: Prometheus would not find the relays", dep)
	}

	// The database URL comes from a Secret.
	dsn := false
	for _, e := range c.Env {
		if e.Name == "DATABASE_URL" {
			dsn = e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name != "" && e.ValueFrom.SecretKeyRef.Key != ""
		}
	}
	if !dsn {
		t.Errorf("%s: DATABASE_URL must come from a secretKeyRef", dep)
	}

	// The grace period outlasts the drain.
	drain := outboxcli.DefaultDrainTimeout
	if v := env["OUTBOX_DRAIN_TIMEOUT"]; v != "" {
		if drain, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	if g := ps.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= drain {
		t.Errorf("%s: terminationGracePeriodSeconds %v must exceed the drain timeout %s, or the kubelet kills a draining relay", dep, g, drain)
	}

	// The Service, the ServiceMonitor and the PodDisruptionBudget select the
	// relay pods; the Service's name is the job alerts.yml expects.
	svcObj := one(t, objs, "Service")
	var svc struct {
		Spec struct {
			Selector                 map[string]string `yaml:"selector"`
			PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
			Ports                    []struct {
				Name       string `yaml:"name"`
				Port       int    `yaml:"port"`
				TargetPort any    `yaml:"targetPort"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	svcObj.decode(t, &svc)
	if len(svc.Spec.Selector) == 0 || !subset(svc.Spec.Selector, podLabels) {
		t.Errorf("%s: selector %v does not select the relay pods %v", svcObj, svc.Spec.Selector, podLabels)
	}
	if !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("%s: publishNotReadyAddresses must be true: a relay that cannot reach the broker is not ready, and its metrics matter most then", svcObj)
	}
	if len(svc.Spec.Ports) != 1 || c.port(svc.Spec.Ports[0].TargetPort) != port {
		t.Errorf("%s: ports %+v, want one whose targetPort is the relay's port %d", svcObj, svc.Spec.Ports, port)
	}

	// Without a ServiceMonitor (pods found by their annotations), the job
	// label is the scrape config's (prometheus/prometheus.yml).
	if len(byKind(objs, "ServiceMonitor")) > 0 {
		checkServiceMonitor(t, objs, svcObj, svc.Spec.Ports[0].Name)
	}
	checkPDB(t, objs, podLabels)
}

// checkServiceMonitor checks that the ServiceMonitor scrapes the Service
// svcObj's port portName under the job alerts.yml expects.
func checkServiceMonitor(t *testing.T, objs []*k8sObject, svcObj *k8sObject, portName string) {
	t.Helper()
	smObj := one(t, objs, "ServiceMonitor")
	var sm struct {
		Spec struct {
			JobLabel string `yaml:"jobLabel"`
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Endpoints []struct {
				Port string `yaml:"port"`
				Path string `yaml:"path"`
			} `yaml:"endpoints"`
		} `yaml:"spec"`
	}
	smObj.decode(t, &sm)
	// prometheus-operator names the job after the Service, or takes it from
	// the Service's label jobLabel names.
	job := svcObj.Metadata.Name
	if sm.Spec.JobLabel != "" {
		job = svcObj.Metadata.Labels[sm.Spec.JobLabel]
	}
	if want := relayJob(t); job != want {
		t.Errorf("%s: the relays are scraped as job %q (Service %s, jobLabel %q); alerts.yml expects %q", smObj, job, svcObj.Metadata.Name, sm.Spec.JobLabel, want)
	}
	if len(sm.Spec.Selector.MatchLabels) == 0 || !subset(sm.Spec.Selector.MatchLabels, svcObj.Metadata.Labels) {
		t.Errorf("%s: selector %v does not select the Service's labels %v", smObj, sm.Spec.Selector.MatchLabels, svcObj.Metadata.Labels)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != portName || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("%s: endpoints %+v, want port %q path /metrics", smObj, sm.Spec.Endpoints, portName)
	}
}

// checkPDB checks that the PodDisruptionBudget covers the relay pods.
func checkPDB(t *testing.T, objs []*k8sObject, podLabels map[string]string) {
	t.Helper()
	pdbObj := one(t, objs, "PodDisruptionBudget")
	var pdb struct {
		Spec struct {
			MaxUnavailable any `yaml:"maxUnavailable"`
			MinAvailable   any `yaml:"minAvailable"`
			Selector       struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
		} `yaml:"spec"`
	}
	pdbObj.decode(t, &pdb)
	if !subset(pdb.Spec.Selector.MatchLabels, podLabels) || len(pdb.Spec.Selector.MatchLabels) == 0 {
		t.Errorf("%s: selector %v does not select the relay pods", pdbObj, pdb.Spec.Selector.MatchLabels)
	}
	if pdb.Spec.MaxUnavailable != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("%s: maxUnavailable %v minAvailable %v, want maxUnavailable 1", pdbObj, pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
	}
}

func TestMigrateJob(t *testing.T) {
	t.Parallel()
	objs := loadManifests(t)
	jobObj := checkMigrateJob(t, objs)
	if !strings.HasPrefix(jobObj.File, k8sDir+"/migrate/") {
		t.Errorf("%s: the Job must stay out of the relay's kustomization (it runs before the rollout)", jobObj)
	}
}

// checkMigrateJob checks the one Job of objs runs `outbox migrate` with the
// database URL from a Secret, and returns it.
func checkMigrateJob(t *testing.T, objs []*k8sObject) *k8sObject {
	t.Helper()
	jobObj := one(t, objs, "Job")
	var j workload
	jobObj.decode(t, &j)
	ps := j.Spec.Template.Spec
	if len(ps.Containers) != 1 {
		t.Fatalf("%s: want one container", jobObj)
	}
	c := ps.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "migrate" {
		t.Errorf("%s: args %q, want [migrate]", jobObj, c.Args)
	}
	if ps.RestartPolicy != "Never" && ps.RestartPolicy != "OnFailure" {
		t.Errorf("%s: restartPolicy %q", jobObj, ps.RestartPolicy)
	}
	ok := false
	for _, e := range c.Env {
		if e.Name == "DATABASE_URL" {
			ok = e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
		}
	}
	if !ok {
		t.Errorf("%s: DATABASE_URL must come from a secretKeyRef", jobObj)
	}
	return jobObj
}

// TestManifestSettings runs the outbox command with each container's
// arguments and environment (secrets replaced by a DSN nobody answers): every
// setting must be one the command knows, and every value valid, so the
// command gets as far as connecting to the database (exit code 3). A typo in
// a variable's name would be ignored by the command; it is caught by
// comparing with the variables `outbox <command> --help` lists.
func TestManifestSettings(t *testing.T) {
	t.Parallel()
	checkSettings(t, loadManifests(t))
}

// checkSettings runs the outbox command of every container of objs with the
// container's arguments and environment; see TestManifestSettings.
func checkSettings(t *testing.T, objs []*k8sObject) {
	t.Helper()
	n := 0
	for _, o := range objs {
		for _, w := range workloads(t, o) {
			for _, c := range w.Spec.Template.Spec.Containers {
				n++
				env := c.environment(t, objs)
				known := commandEnv(t, c.Args[0])
				for k := range env {
					if (strings.HasPrefix(k, "OUTBOX_") || k == "DATABASE_URL") && !known[k] {
						t.Errorf("%s: %s is not a setting of `outbox %s` (see outbox %s --help)", o, k, c.Args[0], c.Args[0])
					}
				}
				var stdout, stderr bytes.Buffer
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				code := outboxcli.Main(ctx, c.Args, &stdout, &stderr, func(k string) string {
					if k == "OUTBOX_WAIT_FOR_DB" && env[k] == "" {
						return "false" // exit 3 at once rather than wait for the database
					}
					return env[k]
				})
				cancel()
				if code != outboxcli.ExitDatabase {
					t.Errorf("%s: outbox %s with the manifest's environment: exit %d, want %d (cannot connect): %s",
						o, strings.Join(c.Args, " "), code, outboxcli.ExitDatabase, stderr.String())
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no container")
	}
}

var helpEnv = regexp.MustCompile(`\benv ([A-Z][A-Z0-9_]*)`)

// commandEnv returns the environment variables `outbox <cmd> --help` lists.
func commandEnv(t *testing.T, cmd string) map[string]bool {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := outboxcli.Main(context.Background(), []string{cmd, "--help"}, &stdout, &stderr, func(string) string { return "" }); code != 0 {
		t.Fatalf("outbox %s --help: exit %d: %s", cmd, code, stderr.String())
	}
	known := map[string]bool{}
	for _, m := range helpEnv.FindAllStringSubmatch(stdout.String(), -1) {
		known[m[1]] = true
	}
	if !known["DATABASE_URL"] {
		t.Fatalf("outbox %s --help lists no DATABASE_URL; the parsing here is out of date:\n%s", cmd, stdout.String())
	}
	return known
}

// TestKustomizeBuild renders both kustomizations with kubectl's built-in
// kustomize, where kubectl is installed (it needs no cluster).
func TestKustomizeBuild(t *testing.T) {
	t.Parallel()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed: kustomize build not checked")
	}
	objs := loadManifests(t)
	for _, k := range byKind(objs, "Kustomization") {
		dir := filepath.Dir(k.File)
		var want int
		for _, o := range objs {
			if o.Kind != "Kustomization" && filepath.Dir(o.File) == dir {
				want++
			}
		}
		out, err := exec.Command(kubectl, "kustomize", dir).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%w: %s", err, ee.Stderr)
			}
			t.Errorf("kubectl kustomize %s: %v", dir, err)
			continue
		}
		got := 0
		dec := yaml.NewDecoder(bytes.NewReader(out))
		for {
			var doc struct {
				Kind string `yaml:"kind"`
				Spec struct {
					Template podTemplate `yaml:"template"`
				} `yaml:"spec"`
			}
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("kubectl kustomize %s: %v", dir, err)
			}
			got++
			for _, c := range doc.Spec.Template.Spec.Containers {
				if !strings.HasPrefix(c.Image, "pgoutbox/outbox:") && !strings.Contains(c.Image, "@sha256:") {
					t.Errorf("kubectl kustomize %s: %s image %q: the kustomization's images: entry did not apply", dir, doc.Kind, c.Image)
				}
			}
		}
		if got != want {
			t.Errorf("kubectl kustomize %s: %d objects, want %d", dir, got, want)
		}
	}
}

func subset(a, b map[string]string) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
