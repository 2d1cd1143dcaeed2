package charttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
)

// HelmVersion is the Helm release the chart is checked with.
const HelmVersion = "v3.22.0"

// HelmModule is the package built as the helm binary.
const HelmModule = "helm.sh/helm/v3/cmd/helm"

var (
	helmOnce sync.Once
	helmBin  string
	helmErr  error
)

// Helm returns the helm binary of HelmVersion under root/.cache/helm/,
// building it with go install (about two minutes) when it is missing.
// Concurrent callers, in this process or others, build it once.
func Helm(root string) (string, error) {
	helmOnce.Do(func() { helmBin, helmErr = buildHelm(root) })
	return helmBin, helmErr
}

func buildHelm(root string) (string, error) {
	dir := filepath.Join(root, ".cache", "helm", HelmVersion)
	bin := filepath.Join(dir, "helm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(filepath.Dir(dir), ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", dir, err)
	}
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	cmd := exec.Command("go", "install", HelmModule+"@"+HelmVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s@%s (needs the Go module proxy the first time): %w\n%s", HelmModule, HelmVersion, err, out)
	}
	return bin, nil
}
