package testserver

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The readiness checks and CREATE DATABASE of PostgreSQL and MariaDB run
// their command-line clients (psql, mariadb), installed with the servers,
// rather than a Go driver: every store's tests import this package, and a
// program importing a store loads those tests' imports into its go.sum, so
// a Redis user would otherwise download pgx and go-sql-driver/mysql.

// runClient runs a database client and returns its error with its output.
func runClient(ctx context.Context, path string, args ...string) error {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("%s: %w: %s", filepath.Base(path), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// psqlPath returns psql beside the postgres binary at bin, or on $PATH.
func psqlPath(bin string) (string, error) {
	if p := filepath.Join(filepath.Dir(bin), "psql"); isExecutable(p) {
		return p, nil
	}
	return lookBinary("psql")
}

// psqlExec runs one statement on the database at url with psql.
func psqlExec(bin, url, statement string, timeout time.Duration) error {
	psql, err := psqlPath(bin)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return runClient(ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", statement)
}

// mariadbClient returns the mariadb (or older mysql) command-line client.
func mariadbClient() (string, error) {
	if p, err := lookBinary("mariadb"); err == nil {
		return p, nil
	}
	return lookBinary("mysql")
}

// mariadbExec runs one statement as root over TCP on the server at addr.
func mariadbExec(addr, statement string, timeout time.Duration) error {
	client, err := mariadbClient()
	if err != nil {
		return err
	}
	host, port, _ := strings.Cut(addr, ":")
	if _, err := strconv.Atoi(port); err != nil {
		return fmt.Errorf("mariadb address %q: want host:port", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return runClient(ctx, client, "--no-defaults", "--protocol=TCP", "--host="+host, "--port="+port,
		"--user=root", "--connect-timeout=2", "--batch", "--execute="+statement)
}
