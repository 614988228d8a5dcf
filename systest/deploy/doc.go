// Package deploy checks the ways to deploy tasklock serve that the
// repository ships, against the binary they run:
//
//   - the static binary: CGO_ENABLED=0 go build ./cmd/tasklock gives an
//     executable with no interpreter and no shared libraries
//     (TestStaticBinary);
//   - the Dockerfile: its build stage runs that same build, its image is
//     FROM scratch, runs as a user that is not root and checks its health
//     with the binary's own probe (TestDockerfile); its last stage built
//     and run with podman, on the binary built here, since the golang base
//     image cannot be pulled on every machine (TestImageWithPodman), and
//     the same steps by hand, as the image's user (TestImageByHand);
//   - the systemd unit, deploy/systemd: systemd-analyze verify and
//     security (TestSystemdUnit);
//   - the Kubernetes manifests, deploy/kubernetes: each document decoded
//     strictly into the k8s.io/api type of its kind, offline, and checked
//     for what the README promises (TestKubernetesManifests).
//
// It is in the systest module so that the Kubernetes API types stay out
// of the library's go.sum. The tools it runs (systemd-analyze, podman,
// runc) come from scripts/install-servers.sh; without one a test skips,
// or with CI=true fails.
package deploy
