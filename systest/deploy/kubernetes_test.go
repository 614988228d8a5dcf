package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// manifests are the Kubernetes objects of deploy/kubernetes, decoded.
type manifests struct {
	deployment *appsv1.Deployment
	service    *corev1.Service
	secret     *corev1.Secret
	configMap  *corev1.ConfigMap
}

// readManifests decodes every document of every file in deploy/kubernetes
// strictly (an unknown or misplaced field is an error) into the type its
// apiVersion and kind name; any other kind fails the test.
func readManifests(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy/kubernetes/*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no files in deploy/kubernetes (%v)", err)
	}
	var m manifests
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(f, ".yaml") {
			t.Errorf("%s: not a .yaml file", f)
			continue
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			var head struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
			var obj any
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 Deployment":
				m.deployment = &appsv1.Deployment{}
				obj = m.deployment
			case "v1 Service":
				m.service = &corev1.Service{}
				obj = m.service
			case "v1 Secret":
				m.secret = &corev1.Secret{}
				obj = m.secret
			case "v1 ConfigMap":
				m.configMap = &corev1.ConfigMap{}
				obj = m.configMap
			default:
				t.Fatalf("%s, document %d: apiVersion %q kind %q: not a kind this test knows", f, i+1, head.APIVersion, head.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s, document %d (%s): %v", f, i+1, head.Kind, err)
			}
		}
	}
	if m.deployment == nil || m.service == nil || m.secret == nil || m.configMap == nil {
		t.Fatalf("deploy/kubernetes lacks a Deployment, Service, Secret or ConfigMap: %+v", m)
	}
	return m
}

// TestKubernetesManifests: the manifests decode strictly into the
// Kubernetes API types, and they fit together and with the image: three
// replicas; liveness on /healthz and readiness on /readyz on the
// container's port, with a timeout above /readyz's; non-root, read-only
// root file system, no capabilities; the token and store from the Secret;
// the Service selects the pods and keeps a browser's session on one pod;
// the ConfigMap's file is valid for the binary.
func TestKubernetesManifests(t *testing.T) {
	m := readManifests(t)
	d := m.deployment
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("Deployment: replicas %v, want 3", d.Spec.Replicas)
	}
	pod := d.Spec.Template
	for k, v := range d.Spec.Selector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("Deployment: the selector %s=%s does not match the pod's labels %v", k, v, pod.Labels)
		}
	}
	for k, v := range m.service.Spec.Selector {
		if pod.Labels[k] != v {
			t.Errorf("Service: the selector %s=%s does not match the pod's labels %v", k, v, pod.Labels)
		}
	}
	if m.service.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		t.Errorf("Service: sessionAffinity %q; login sessions live in one pod's memory: want ClientIP", m.service.Spec.SessionAffinity)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("Deployment: %d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	im := readImage(t)

	// The container serves where the probes and the Service look.
	httpAddr := flagValue(c.Args, "--http")
	if len(c.Args) == 0 || c.Args[0] != "serve" || !strings.HasPrefix(httpAddr, "0.0.0.0:") {
		t.Errorf("container args %q: want serve --http 0.0.0.0:PORT (the image's ENTRYPOINT is the binary)", c.Args)
	}
	var port *corev1.ContainerPort
	for i := range c.Ports {
		if strings.HasSuffix(httpAddr, ":"+itoa(c.Ports[i].ContainerPort)) {
			port = &c.Ports[i]
		}
	}
	if port == nil || port.Name == "" {
		t.Fatalf("container ports %+v: none named for --http %s", c.Ports, httpAddr)
	}
	for _, p := range m.service.Spec.Ports {
		if p.TargetPort.String() != port.Name && p.TargetPort.IntValue() != int(port.ContainerPort) {
			t.Errorf("Service port %s targets %s, not the container's %s", p.Name, p.TargetPort.String(), port.Name)
		}
	}
	probe := func(what string, p *corev1.Probe, path string, minTimeout int32) {
		t.Helper()
		switch {
		case p == nil || p.HTTPGet == nil:
			t.Errorf("%s: want an httpGet probe of %s", what, path)
		case p.HTTPGet.Path != path || (p.HTTPGet.Port.String() != port.Name && p.HTTPGet.Port.IntValue() != int(port.ContainerPort)):
			t.Errorf("%s: GET %s on port %s, want %s on %s", what, p.HTTPGet.Path, p.HTTPGet.Port.String(), path, port.Name)
		case p.TimeoutSeconds < minTimeout:
			t.Errorf("%s: timeoutSeconds %d, want at least %d", what, p.TimeoutSeconds, minTimeout)
		}
	}
	probe("livenessProbe", c.LivenessProbe, "/healthz", 1)
	probe("readinessProbe", c.ReadinessProbe, "/readyz", 3) // /readyz waits up to 2s for the store

	// Not root, nothing to escalate to, nothing written but /tmp.
	psc, sc := pod.Spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != int64(im.uid) {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and runAsUser %d, the image's user", psc, im.uid)
	}
	if psc != nil && (psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
		t.Errorf("pod securityContext: want seccompProfile RuntimeDefault")
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container securityContext %+v: want readOnlyRootFilesystem, no privilege escalation, drop ALL", sc)
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token it never uses")
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g <= 30 {
		t.Errorf("terminationGracePeriodSeconds %v: want more than serve's --grace of 30s", g)
	}

	// The token and the store come from the Secret, the file from the
	// ConfigMap.
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for name, key := range map[string]string{"TASKLOCK_TOKEN": "token", "TASKLOCK_STORE": "store"} {
		ref := env[name].ValueFrom
		if ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != m.secret.Name || ref.SecretKeyRef.Key != key {
			t.Errorf("env %s: want the Secret %s's key %s", name, m.secret.Name, key)
		} else if _, ok := m.secret.StringData[key]; !ok {
			t.Errorf("Secret %s has no key %s", m.secret.Name, key)
		}
	}
	if e := env["TASKLOCK_NODE"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("env TASKLOCK_NODE: want the pod's name (distinct per replica, readable on the nodes page)")
	}
	cfgPath := flagValue(c.Args, "--config")
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if filepath.Dir(cfgPath) == c.VolumeMounts[i].MountPath {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("--config %s is in no volume mount", cfgPath)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == mount.Name && (v.ConfigMap == nil || v.ConfigMap.Name != m.configMap.Name) {
			t.Errorf("volume %s is not the ConfigMap %s", v.Name, m.configMap.Name)
		}
	}
	file, ok := m.configMap.Data[filepath.Base(cfgPath)]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s, the --config file", m.configMap.Name, filepath.Base(cfgPath))
	}
	if regexp.MustCompile(`(?m)^(store|node):`).MatchString(file) {
		t.Errorf("the ConfigMap's file sets store: or node:, which the Secret and the pod name set")
	}
	validate := exec.Command(tasklockBin, "validate", "--config", "/dev/stdin")
	validate.Stdin = bytes.NewReader([]byte(file))
	if out, err := validate.CombinedOutput(); err != nil {
		t.Errorf("tasklock validate on the ConfigMap's %s: %v\n%s", filepath.Base(cfgPath), err, out)
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
