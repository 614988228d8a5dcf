# tasklock serve in a container: a static binary on an empty image.
#
#   docker build -t tasklock .          (or: podman build --format docker -t tasklock .)
#   docker run -d -p 8080:8080 -e TASKLOCK_TOKEN=... -e TASKLOCK_STORE=redis://redis:6379 \
#     -v tasklock-config:/etc/tasklock:ro tasklock
#
# The image holds /tasklock, CA certificates (for rediss://, etcds:// and
# https jobs) and the zone database (for jobs with a timezone:), nothing
# else: no shell, so command jobs can run only programs you add. It runs as
# uid 65532, with /var/lib/tasklock (owned by it) for a SQLite store.
# systest/deploy checks this file: the build below matches the static build
# it tests, the user is not root, and the health check is the binary's.

# The build stage: pin the Go release (go.mod's go line is the minimum).
FROM golang:1.25-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO_ENABLED=0: no libc, so it runs FROM scratch (SQLite is pure Go).
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/tasklock ./cmd/tasklock \
 && mkdir -p /out/var/lib/tasklock /out/etc/tasklock

# The image.
FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /usr/local/go/lib/time/zoneinfo.zip /zoneinfo.zip
COPY --from=build --chown=65532:65532 /out/var/lib/tasklock /var/lib/tasklock
COPY --from=build /out/etc/tasklock /etc/tasklock
COPY --from=build /out/tasklock /tasklock
ENV ZONEINFO=/zoneinfo.zip
USER 65532:65532
WORKDIR /var/lib/tasklock
EXPOSE 8080
# The dashboard's liveness: serve listens on 0.0.0.0:8080, health asks
# 127.0.0.1:8080. (A readiness check is --ready: it fails while the store
# is down, which is a reason to stop routing, not to restart.)
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/tasklock", "health", "--http", "0.0.0.0:8080", "--timeout", "4s"]
ENTRYPOINT ["/tasklock"]
CMD ["serve", "--config", "/etc/tasklock/tasklock.yaml", "--http", "0.0.0.0:8080"]
