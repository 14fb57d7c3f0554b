package deploy

import (
	"fmt"
	"regexp"
	"slices"
	"testing"
)

// dnsLabel is the form of the names Kubernetes gives DNS records to
// (Services) and of the label values we set: RFC 1123 labels.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// labelSelector is a selector by labels only (matchExpressions are not used
// by our manifests; one would be reported).
type labelSelector struct {
	MatchLabels      map[string]string `yaml:"matchLabels"`
	MatchExpressions []any             `yaml:"matchExpressions"`
}

// validateManifests is the schema check of a set of manifests, whatever made
// them (files, kustomize, helm template): every object has a known kind at
// its apiVersion, a valid name and the common label; each kind has the
// fields the API server requires; and the objects fit together: selectors
// select pods that exist, ports and ConfigMaps, Secrets' keys and service
// accounts referenced are named. It returns one line per problem.
func validateManifests(objs []*k8sObject) []string {
	var problems []string
	bad := func(o *k8sObject, format string, args ...any) {
		problems = append(problems, o.String()+": "+fmt.Sprintf(format, args...))
	}
	type pods struct {
		owner  *k8sObject
		labels map[string]string
		ports  []string // container port names
	}
	var allPods []pods
	configMaps, serviceAccounts := map[string]bool{}, map[string]bool{"default": true}
	services := map[string]*k8sObject{}
	seen := map[string]bool{}
	for _, o := range objs {
		if o.Kind == "Kustomization" {
			continue
		}
		if want, ok := wantAPIVersion[o.Kind]; !ok {
			bad(o, "unexpected kind")
		} else if o.APIVersion != want {
			bad(o, "apiVersion %q, want %q", o.APIVersion, want)
		}
		if !dnsLabel.MatchString(o.Metadata.Name) || len(o.Metadata.Name) > 63 {
			bad(o, "name %q is not a DNS label of at most 63 characters", o.Metadata.Name)
		}
		if o.Metadata.Labels["app.kubernetes.io/name"] != "pgoutbox" {
			bad(o, "no label app.kubernetes.io/name: pgoutbox")
		}
		for k, v := range o.Metadata.Labels {
			if len(v) > 63 || (v != "" && !regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`).MatchString(v)) {
				bad(o, "label %s: value %q is not a valid label value", k, v)
			}
		}
		key := o.Kind + "/" + o.Metadata.Name
		if seen[key] {
			bad(o, "defined twice")
		}
		seen[key] = true
		switch o.Kind {
		case "ConfigMap":
			configMaps[o.Metadata.Name] = true
		case "ServiceAccount":
			serviceAccounts[o.Metadata.Name] = true
		case "Service":
			services[o.Metadata.Name] = o
		}
	}
	for _, o := range objs {
		if o.Kind != "Deployment" && o.Kind != "Job" {
			continue
		}
		var w struct {
			Spec struct {
				Selector *labelSelector `yaml:"selector"`
				Template struct {
					Metadata struct {
						Labels map[string]string `yaml:"labels"`
					} `yaml:"metadata"`
					Spec struct {
						ServiceAccountName string      `yaml:"serviceAccountName"`
						RestartPolicy      string      `yaml:"restartPolicy"`
						Containers         []container `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := o.Node.Decode(&w); err != nil {
			bad(o, "%v", err)
			continue
		}
		tpl := w.Spec.Template
		if o.Kind == "Deployment" {
			if w.Spec.Selector == nil || len(w.Spec.Selector.MatchLabels) == 0 {
				bad(o, "spec.selector.matchLabels is required")
			} else if !subset(w.Spec.Selector.MatchLabels, tpl.Metadata.Labels) {
				bad(o, "selector %v does not match the pod template's labels %v", w.Spec.Selector.MatchLabels, tpl.Metadata.Labels)
			}
			if tpl.Spec.RestartPolicy != "" && tpl.Spec.RestartPolicy != "Always" {
				bad(o, "restartPolicy %q: a Deployment's pods restart Always", tpl.Spec.RestartPolicy)
			}
		} else if tpl.Spec.RestartPolicy != "Never" && tpl.Spec.RestartPolicy != "OnFailure" {
			bad(o, "restartPolicy %q: a Job needs Never or OnFailure", tpl.Spec.RestartPolicy)
		}
		if sa := tpl.Spec.ServiceAccountName; sa != "" && !serviceAccounts[sa] {
			bad(o, "serviceAccountName %q is not in the manifests", sa)
		}
		if len(tpl.Spec.Containers) == 0 {
			bad(o, "no container")
		}
		p := pods{owner: o, labels: tpl.Metadata.Labels}
		for _, c := range tpl.Spec.Containers {
			if c.Name == "" || c.Image == "" {
				bad(o, "a container needs a name and an image (name %q, image %q)", c.Name, c.Image)
			}
			for _, port := range c.Ports {
				if port.ContainerPort < 1 || port.ContainerPort > 65535 {
					bad(o, "container %s: port %s: containerPort %d", c.Name, port.Name, port.ContainerPort)
				}
				p.ports = append(p.ports, port.Name)
			}
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef != nil && !configMaps[ef.ConfigMapRef.Name] {
					bad(o, "container %s: ConfigMap %s is not in the manifests", c.Name, ef.ConfigMapRef.Name)
				}
			}
			for _, e := range c.Env {
				if e.Name == "" || (e.Value == nil && e.ValueFrom == nil) {
					bad(o, "container %s: env entry %q has no value", c.Name, e.Name)
				}
				if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && (r.SecretKeyRef.Name == "" || r.SecretKeyRef.Key == "") {
					bad(o, "container %s: %s: secretKeyRef needs a name and a key", c.Name, e.Name)
				}
			}
		}
		allPods = append(allPods, p)
	}
	// selects returns the pods sel selects; a selector must select some.
	selects := func(o *k8sObject, what string, sel map[string]string) []pods {
		var out []pods
		for _, p := range allPods {
			if len(sel) > 0 && subset(sel, p.labels) {
				out = append(out, p)
			}
		}
		if len(out) == 0 {
			bad(o, "%s %v selects no pod of the manifests", what, sel)
		}
		return out
	}
	for _, o := range objs {
		switch o.Kind {
		case "Service":
			var s struct {
				Spec struct {
					Selector map[string]string `yaml:"selector"`
					Ports    []struct {
						Name       string `yaml:"name"`
						Port       int    `yaml:"port"`
						TargetPort any    `yaml:"targetPort"`
					} `yaml:"ports"`
				} `yaml:"spec"`
			}
			o.Node.Decode(&s)
			selected := selects(o, "selector", s.Spec.Selector)
			if len(s.Spec.Ports) == 0 {
				bad(o, "no port")
			}
			for _, p := range s.Spec.Ports {
				if p.Port < 1 || p.Port > 65535 {
					bad(o, "port %q: %d", p.Name, p.Port)
				}
				if name, ok := p.TargetPort.(string); ok {
					for _, sp := range selected {
						if !slices.Contains(sp.ports, name) {
							bad(o, "targetPort %q is not a container port of %s", name, sp.owner)
						}
					}
				}
			}
		case "PodDisruptionBudget":
			var pdb struct {
				Spec struct {
					Selector       labelSelector `yaml:"selector"`
					MaxUnavailable any           `yaml:"maxUnavailable"`
					MinAvailable   any           `yaml:"minAvailable"`
				} `yaml:"spec"`
			}
			o.Node.Decode(&pdb)
			selects(o, "selector", pdb.Spec.Selector.MatchLabels)
			if (pdb.Spec.MaxUnavailable == nil) == (pdb.Spec.MinAvailable == nil) {
				bad(o, "want exactly one of maxUnavailable and minAvailable")
			}
		case "NetworkPolicy":
			var np struct {
				Spec struct {
					PodSelector labelSelector `yaml:"podSelector"`
					PolicyTypes []string      `yaml:"policyTypes"`
					Ingress     []struct {
						Ports []struct {
							Port any `yaml:"port"`
						} `yaml:"ports"`
					} `yaml:"ingress"`
					Egress []any `yaml:"egress"`
				} `yaml:"spec"`
			}
			o.Node.Decode(&np)
			selected := selects(o, "podSelector", np.Spec.PodSelector.MatchLabels)
			for _, typ := range np.Spec.PolicyTypes {
				if typ != "Ingress" && typ != "Egress" {
					bad(o, "policyType %q", typ)
				}
			}
			if slices.Contains(np.Spec.PolicyTypes, "Egress") && len(np.Spec.Egress) == 0 {
				bad(o, "policyType Egress without a rule denies every connection, the database's included")
			}
			for _, in := range np.Spec.Ingress {
				for _, p := range in.Ports {
					if name, ok := p.Port.(string); ok {
						for _, sp := range selected {
							if !slices.Contains(sp.ports, name) {
								bad(o, "ingress port %q is not a container port of %s", name, sp.owner)
							}
						}
					}
				}
			}
		case "ServiceMonitor":
			var sm struct {
				Spec struct {
					Selector  labelSelector `yaml:"selector"`
					Endpoints []struct {
						Port string `yaml:"port"`
					} `yaml:"endpoints"`
				} `yaml:"spec"`
			}
			o.Node.Decode(&sm)
			n := 0
			for _, svc := range services {
				if len(sm.Spec.Selector.MatchLabels) > 0 && subset(sm.Spec.Selector.MatchLabels, svc.Metadata.Labels) {
					n++
					var sp struct {
						Spec struct {
							Ports []struct {
								Name string `yaml:"name"`
							} `yaml:"ports"`
						} `yaml:"spec"`
					}
					svc.Node.Decode(&sp)
					for _, ep := range sm.Spec.Endpoints {
						if !slices.ContainsFunc(sp.Spec.Ports, func(p struct {
							Name string `yaml:"name"`
						}) bool {
							return p.Name == ep.Port
						}) {
							bad(o, "endpoint port %q is not a port name of Service %s", ep.Port, svc.Metadata.Name)
						}
					}
				}
			}
			if n == 0 {
				bad(o, "selector %v selects no Service of the manifests", sm.Spec.Selector.MatchLabels)
			}
			if len(sm.Spec.Endpoints) == 0 {
				bad(o, "no endpoint")
			}
		case "PrometheusRule":
			var pr struct {
				Spec struct {
					Groups []struct {
						Name  string      `yaml:"name"`
						Rules []alertRule `yaml:"rules"`
					} `yaml:"groups"`
				} `yaml:"spec"`
			}
			o.Node.Decode(&pr)
			if len(pr.Spec.Groups) == 0 {
				bad(o, "no rule group")
			}
			for _, g := range pr.Spec.Groups {
				if g.Name == "" || len(g.Rules) == 0 {
					bad(o, "group %q: a name and rules are required", g.Name)
				}
				for _, r := range g.Rules {
					if (r.Alert == "") == (r.Record == "") || r.Expr == "" {
						bad(o, "group %q: rule %q/%q: want one of alert and record, and an expr", g.Name, r.Alert, r.Record)
					}
				}
			}
		}
	}
	return problems
}

// TestKustomizeSchema runs the schema check on the Kustomize set.
func TestKustomizeSchema(t *testing.T) {
	t.Parallel()
	for _, p := range validateManifests(loadManifests(t)) {
		t.Error(p)
	}
}
