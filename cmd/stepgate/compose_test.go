package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/stepgate/stepgate/internal/tooling/repo"
)

// composeService is what TestComposeFile reads of a service of compose.yaml.
type composeService struct {
	Build       any               `yaml:"build"`
	User        string            `yaml:"user"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

// TestComposeFile: compose.yaml publishes its one port on loopback only, ships no JWT
// secret, and has the secrets service make one at first start (compose/secret.sh
// init) before any service that needs it starts; those read it through secret.sh run.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	root, err := repo.Root()
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "compose.yaml"))
	require.NoError(t, err)
	var f struct {
		Services map[string]composeService `yaml:"services"`
		Volumes  map[string]any            `yaml:"volumes"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &f))
	require.Contains(t, f.Volumes, "secrets")

	published := 0
	for name, s := range f.Services {
		for _, p := range s.Ports {
			require.True(t, strings.HasPrefix(p, "127.0.0.1:"), "service %s publishes %q beyond this machine", name, p)
			published++
		}
		require.NotContains(t, s.Environment, "STEPGATE_JWT_SECRET", "service %s ships a fixed secret", name)
	}
	require.Equal(t, []string{"127.0.0.1:8080:8080"}, f.Services["lb"].Ports)
	require.Equal(t, 1, published)
	require.NotRegexp(t, regexp.MustCompile(`(?m)^\s*STEPGATE_JWT_SECRET:`), string(raw))

	init := f.Services["secrets"]
	require.Equal(t, []string{"/bin/sh", "/secret.sh", "init"}, init.Entrypoint)
	require.Equal(t, "0:0", init.User, "the volume is root's when new")
	require.Contains(t, init.Volumes, "secrets:/secrets")
	require.Contains(t, init.Volumes, "./compose/secret.sh:/secret.sh:ro")

	for _, name := range []string{"gateway", "gateway-2", "functions", "register"} {
		s := f.Services[name]
		require.Equal(t, []string{"/bin/sh", "/secret.sh", "run"}, s.Entrypoint[:3], name)
		require.Contains(t, s.Volumes, "secrets:/secrets:ro", name)
		require.Contains(t, s.Volumes, "./compose/secret.sh:/secret.sh:ro", name)
		require.Equal(t, "service_completed_successfully", s.DependsOn["secrets"].Condition, name)
	}
	require.Equal(t, []string{"/stepgate", "serve"}, f.Services["gateway"].Command)
	for name, s := range f.Services {
		if s.Build != nil && name != "secrets" {
			require.Contains(t, s.DependsOn, "secrets", "service %s runs the image without the secret", name)
		}
	}
}

// TestComposeSecretScript runs compose/secret.sh as the compose services do: init makes
// a random secret once and keeps it, never printing it; run hands it to the command in
// STEPGATE_JWT_SECRET; with no secret, run refuses to start the command.
func TestComposeSecretScript(t *testing.T) {
	t.Parallel()
	root, err := repo.Root()
	require.NoError(t, err)
	script := filepath.Join(root, "compose", "secret.sh")
	dir := t.TempDir()
	file := filepath.Join(dir, "jwt_secret")
	sh := func(args ...string) (string, string, error) {
		cmd := exec.Command("sh", append([]string{script}, args...)...)
		cmd.Env = append(os.Environ(), "STEPGATE_SECRET_FILE="+file,
			fmt.Sprintf("STEPGATE_SECRET_OWNER=%d:%d", os.Getuid(), os.Getgid()))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}

	_, stderr, err := sh("run", "true")
	require.Error(t, err, "no secret yet")
	require.Contains(t, stderr, "no JWT secret in "+file)

	out, _, err := sh("init")
	require.NoError(t, err)
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	secret := strings.TrimSpace(string(b))
	require.Regexp(t, `^[0-9a-f]{64}$`, secret, "32 random bytes, in hex")
	require.NotContains(t, out, secret)
	st, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	out, _, err = sh("init")
	require.NoError(t, err)
	require.Contains(t, out, "keeping")
	again, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, string(b), string(again), "a second start keeps the secret")

	out, _, err = sh("run", "sh", "-c", `printf '%s' "$STEPGATE_JWT_SECRET"`)
	require.NoError(t, err)
	require.Equal(t, secret, out)

	other := t.TempDir()
	file = filepath.Join(other, "jwt_secret")
	require.NoError(t, os.WriteFile(file, nil, 0o600)) // a start cut short
	_, _, err = sh("init")
	require.NoError(t, err)
	b, err = os.ReadFile(file)
	require.NoError(t, err)
	require.Regexp(t, `^[0-9a-f]{64}\n$`, string(b))
	require.NotEqual(t, secret+"\n", string(b), "each deployment has its own")

	_, stderr, err = sh("nonsense")
	require.Error(t, err)
	require.Contains(t, stderr, "usage")
}
